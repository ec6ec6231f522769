package targets

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// TestLeaseJudgedOnTheHubClock: a renewal counts from when the hub saw the
// Lease change, whatever the agent's clock wrote into it.
func TestLeaseJudgedOnTheHubClock(t *testing.T) {
	const lease, grace = 40 * time.Second, 20 * time.Second
	cases := map[string]struct {
		// versions the hub sees, one per step of 10 s of hub time.
		versions  []string
		disrupted bool
		policy    policy
		want      verdict
	}{
		"no Lease yet": {versions: []string{""},
			want: verdict{reason: v1alpha1.ReasonNoHeartbeat, recheck: lease + time.Second}},
		"renewed every step": {versions: []string{"1", "2", "3", "4", "5", "6", "7", "8"},
			want: verdict{reason: v1alpha1.ReasonHeartbeatFresh, recheck: lease + time.Second}},
		"silent for 30 s is fresh": {versions: []string{"1", "1", "1", "1"},
			want: verdict{reason: v1alpha1.ReasonHeartbeatFresh, recheck: 11 * time.Second}},
		"silent for 50 s: not renewed, not yet requeued": {versions: []string{"1", "1", "1", "1", "1", "1"},
			want: verdict{reason: v1alpha1.ReasonLeaseNotRenewed, recheck: 5 * time.Second}},
		"silent for 70 s: lost": {versions: []string{"1", "1", "1", "1", "1", "1", "1", "1"},
			want: verdict{reason: v1alpha1.ReasonLeaseExpired, lost: true, recheck: silentRecheck}},
		"silent for 70 s in disruption: nothing requeued": {versions: []string{"1", "1", "1", "1", "1", "1", "1", "1"}, disrupted: true,
			want: verdict{reason: v1alpha1.ReasonHubDisrupted, recheck: silentRecheck}},
		"silent for 70 s on a Hold target: awaiting the agent": {versions: []string{"1", "1", "1", "1", "1", "1", "1", "1"}, policy: policy{hold: true},
			want: verdict{reason: v1alpha1.ReasonAwaitingAgent, recheck: silentRecheck}},
		"silent for 50 s out of service: lost without the grace": {versions: []string{"1", "1", "1", "1", "1", "1"}, policy: policy{hold: true, outOfService: true},
			want: verdict{reason: v1alpha1.ReasonOutOfService, lost: true, recheck: silentRecheck}},
		"out of service in disruption: lost": {versions: []string{"1", "1", "1", "1", "1", "1"}, disrupted: true, policy: policy{outOfService: true},
			want: verdict{reason: v1alpha1.ReasonOutOfService, lost: true, recheck: silentRecheck}},
		"out of service while renewed: fresh, nothing requeued": {versions: []string{"1", "2", "3", "4", "5", "6"}, policy: policy{outOfService: true},
			want: verdict{reason: v1alpha1.ReasonHeartbeatFresh, recheck: lease + time.Second}},
		"never renewed for 70 s: lost": {versions: []string{"", "", "", "", "", "", "", ""},
			want: verdict{reason: v1alpha1.ReasonLeaseExpired, lost: true, recheck: silentRecheck}},
		"a renewal after silence is fresh again": {versions: []string{"1", "1", "1", "1", "1", "1", "1", "2"},
			want: verdict{reason: v1alpha1.ReasonHeartbeatFresh, recheck: lease + time.Second}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tr := newTracker()
			var o observation
			now := t0
			for i, v := range tc.versions {
				now = t0.Add(time.Duration(i) * 10 * time.Second)
				o = tr.observe("a", v, lease, now)
			}
			got := judge(o, now.Sub(o.at), grace, tc.disrupted, tc.policy)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(verdict{})); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAgentClockSkewIsIgnored: the agent's renewTime is never read; a Lease
// written by an agent minutes behind or ahead is fresh as long as it changes.
func TestAgentClockSkewIsIgnored(t *testing.T) {
	for name, skew := range map[string]time.Duration{"5 min behind": -5 * time.Minute, "5 min ahead": 5 * time.Minute, "none": 0} {
		t.Run(name, func(t *testing.T) {
			tr := newTracker()
			// The version string stands for the whole Lease: what the agent
			// wrote as renewTime changes only its content.
			for i := 0; i < 10; i++ {
				renewTime := t0.Add(time.Duration(i)*10*time.Second + skew)
				o := tr.observe("a", renewTime.Format(time.RFC3339Nano), 40*time.Second, t0.Add(time.Duration(i)*10*time.Second))
				if v := judge(o, t0.Add(time.Duration(i)*10*time.Second).Sub(o.at), 20*time.Second, false, policy{}); v.reason != v1alpha1.ReasonHeartbeatFresh {
					t.Fatalf("step %d: %s, want fresh", i, v.reason)
				}
			}
		})
	}
}

// TestDisruptionMode: more than the threshold of all targets silent at once
// means the hub is cut off.
func TestDisruptionMode(t *testing.T) {
	cases := map[string]struct {
		silent, total int
		threshold     float64
		want          bool
	}{
		"none silent":                       {0, 5, 0.55, false},
		"one of five":                       {1, 5, 0.55, false},
		"half of two: requeue":              {1, 2, 0.55, false},
		"both of two":                       {2, 2, 0.55, true},
		"three of five":                     {3, 5, 0.55, true},
		"fleet of one silent":               {1, 1, 0.55, true},
		"fleet of one fresh":                {0, 1, 0.55, false},
		"no targets":                        {0, 0, 0.55, false},
		"threshold 1 never":                 {5, 5, 1, false},
		"exactly at the threshold is below": {11, 20, 0.55, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := inDisruption(tc.silent, tc.total, tc.threshold); got != tc.want {
				t.Errorf("inDisruption(%d, %d, %v) = %v, want %v", tc.silent, tc.total, tc.threshold, got, tc.want)
			}
		})
	}
}

// TestFleetCountsSilentTargetsOnTheHubClock: the tracker's fleet view, and
// that entering and leaving disruption is reported once each.
func TestFleetCountsSilentTargetsOnTheHubClock(t *testing.T) {
	tr := newTracker()
	for _, n := range []string{"a", "b", "c"} {
		tr.observe(n, "1", 40*time.Second, t0)
	}
	type step struct {
		at                 time.Duration
		renew              []string
		silent             int
		disrupted, changed bool
	}
	steps := []step{
		{at: 30 * time.Second, renew: []string{"a", "b", "c"}, silent: 0},
		{at: 75 * time.Second, renew: []string{"a", "b"}, silent: 1},
		{at: 125 * time.Second, silent: 3, disrupted: true, changed: true},
		{at: 130 * time.Second, silent: 3, disrupted: true},
		{at: 135 * time.Second, renew: []string{"a", "b"}, silent: 1, changed: true},
	}
	version := 2
	for i, s := range steps {
		now := t0.Add(s.at)
		for _, n := range s.renew {
			version++
			tr.observe(n, string(rune('0'+version)), 40*time.Second, now)
		}
		silent, total, disrupted, changed := tr.fleet(now, 0.55)
		if silent != s.silent || total != 3 || disrupted != s.disrupted || changed != s.changed {
			t.Errorf("step %d: silent %d/%d disrupted %v changed %v, want %d/3 %v %v", i, silent, total, disrupted, changed,
				s.silent, s.disrupted, s.changed)
		}
	}
	tr.forget("c")
	if _, total, _, _ := tr.fleet(t0.Add(136*time.Second), 0.55); total != 2 {
		t.Errorf("after forget: %d targets, want 2", total)
	}
}
