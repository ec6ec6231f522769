package targets

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// silent is the Lease versions of a target renewed once and then silent for
// steps of 10 s of hub time.
func silent(steps int) []string {
	v := []string{"1"}
	for range steps {
		v = append(v, "1")
	}
	return v
}

// TestLeaseJudgedOnTheHubClock: a renewal counts from when the hub saw the
// Lease change, whatever the agent's clock wrote into it. A silent target
// takes no new jobs after the lease; its running jobs are requeued only
// once the agent's fence deadline, its stop bound and the grace have
// passed, and only where the Target and the agent both say Requeue.
func TestLeaseJudgedOnTheHubClock(t *testing.T) {
	settings := LeaseSettings{Duration: 40 * time.Second, FenceAfter: 60 * time.Second, Grace: 20 * time.Second}
	requeue := v1alpha1.Advertised{MayRequeue: true, FenceAfter: 60 * time.Second, StopWithin: 10 * time.Second}
	hold := v1alpha1.Advertised{FenceAfter: 60 * time.Second, StopWithin: 10 * time.Second}
	cases := map[string]struct {
		// versions the hub sees, one per step of 10 s of hub time.
		versions  []string
		enforced  *v1alpha1.Advertised
		disrupted bool
		blind     bool
		policy    policy
		want      verdict
	}{
		"no Lease yet": {versions: []string{""},
			want: verdict{reason: v1alpha1.ReasonNoHeartbeat, recheck: 41 * time.Second}},
		"renewed every step": {versions: []string{"1", "2", "3", "4", "5", "6", "7", "8"},
			want: verdict{reason: v1alpha1.ReasonHeartbeatFresh, recheck: 41 * time.Second}},
		"silent for 30 s is fresh": {versions: silent(3),
			want: verdict{reason: v1alpha1.ReasonHeartbeatFresh, recheck: 11 * time.Second}},
		"silent for 50 s: no new jobs, running ones run on": {versions: silent(5),
			want: verdict{reason: v1alpha1.ReasonLeaseNotRenewed, recheck: 5 * time.Second}},
		"silent for 90 s: fence deadline, stop bound and grace not yet passed": {versions: silent(9),
			want: verdict{reason: v1alpha1.ReasonLeaseNotRenewed, recheck: time.Second}},
		"silent for 100 s: lost": {versions: silent(10),
			want: verdict{reason: v1alpha1.ReasonLeaseExpired, lost: true, recheck: silentRecheck}},
		"a longer fence deadline the agent advertises wins": {versions: silent(10),
			enforced: &v1alpha1.Advertised{MayRequeue: true, FenceAfter: 5 * time.Minute},
			want:     verdict{reason: v1alpha1.ReasonLeaseNotRenewed, recheck: silentRecheck}},
		"silent for 100 s in disruption: nothing requeued": {versions: silent(10), disrupted: true,
			want: verdict{reason: v1alpha1.ReasonHubDisrupted, recheck: silentRecheck}},
		"silent for 100 s while the hub is blind: nothing requeued": {versions: silent(10), blind: true,
			want: verdict{reason: v1alpha1.ReasonHubDisrupted, recheck: silentRecheck}},
		"silent for 100 s on a Hold target: awaiting the agent": {versions: silent(10), policy: policy{hold: true},
			want: verdict{reason: v1alpha1.ReasonAwaitingAgent, recheck: silentRecheck}},
		"silent for 100 s, agent last said Hold: awaiting it": {versions: silent(10), enforced: &hold,
			want: verdict{reason: v1alpha1.ReasonAwaitingAgent, recheck: silentRecheck}},
		"silent for 50 s out of service: lost without the wait": {versions: silent(5), policy: policy{hold: true, outOfService: true},
			want: verdict{reason: v1alpha1.ReasonOutOfService, lost: true, recheck: silentRecheck}},
		"out of service in disruption: lost": {versions: silent(5), disrupted: true, policy: policy{outOfService: true},
			want: verdict{reason: v1alpha1.ReasonOutOfService, lost: true, recheck: silentRecheck}},
		"out of service while the hub is blind: nothing requeued": {versions: silent(5), blind: true, policy: policy{outOfService: true},
			want: verdict{reason: v1alpha1.ReasonHubDisrupted, recheck: silentRecheck}},
		"out of service while renewed: fresh, nothing requeued": {versions: []string{"1", "2", "3", "4", "5", "6"}, policy: policy{outOfService: true},
			want: verdict{reason: v1alpha1.ReasonHeartbeatFresh, recheck: 41 * time.Second}},
		"never renewed for 100 s: lost": {versions: []string{"", "", "", "", "", "", "", "", "", "", ""},
			want: verdict{reason: v1alpha1.ReasonLeaseExpired, lost: true, recheck: silentRecheck}},
		"a renewal after silence is fresh again": {versions: append(silent(8), "2"),
			want: verdict{reason: v1alpha1.ReasonHeartbeatFresh, recheck: 41 * time.Second}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tr := newTracker(t0)
			enforced := requeue
			if tc.enforced != nil {
				enforced = *tc.enforced
			}
			var o observation
			now := t0
			for i, v := range tc.versions {
				now = t0.Add(time.Duration(i) * 10 * time.Second)
				o = tr.observe("a", v, settings.Duration, enforced, now)
			}
			got := judge(o, now.Sub(o.at), settings, tc.disrupted, tc.blind, tc.policy)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(verdict{})); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBlindTimeIsNotSilence: while the hub cannot see its own API server it
// is blind, and once it sees it again every lease counts from then.
func TestBlindTimeIsNotSilence(t *testing.T) {
	tr := newTracker(t0)
	o := tr.observe("a", "1", 40*time.Second, v1alpha1.Advertised{MayRequeue: true}, t0)
	for at := time.Duration(0); at <= 10*time.Second; at += probeInterval {
		tr.sighted(t0.Add(at))
	}
	// The API server freezes at 10 s for ten minutes: no probe succeeds.
	during := t0.Add(5 * time.Minute)
	if _, blind := tr.age(o, during); !blind {
		t.Fatalf("5 minutes without a probe: not blind")
	}
	back := t0.Add(10*time.Minute + 10*time.Second)
	if ended, gap := tr.sighted(back); !ended || gap != 10*time.Minute {
		t.Fatalf("sighted after the freeze: ended %v after %s, want true after 10m", ended, gap)
	}
	for at := probeInterval; at <= 30*time.Second; at += probeInterval {
		if ended, _ := tr.sighted(back.Add(at)); ended {
			t.Fatalf("a probe on time ended a blind spell")
		}
	}
	age, blind := tr.age(o, back.Add(30*time.Second))
	if blind || age != 30*time.Second {
		t.Errorf("30 s after the freeze: age %s blind %v, want 30s and not blind", age, blind)
	}
	if silent, _, _, _ := tr.fleet(back.Add(30*time.Second), 0.55); silent != 0 {
		t.Errorf("30 s after the freeze: %d silent targets, want 0", silent)
	}
}

// TestAgentClockSkewIsIgnored: the agent's renewTime is never read; a Lease
// written by an agent minutes behind or ahead is fresh as long as it changes.
func TestAgentClockSkewIsIgnored(t *testing.T) {
	for name, skew := range map[string]time.Duration{"5 min behind": -5 * time.Minute, "5 min ahead": 5 * time.Minute, "none": 0} {
		t.Run(name, func(t *testing.T) {
			tr := newTracker(t0)
			// The version string stands for the whole Lease: what the agent
			// wrote as renewTime changes only its content.
			for i := 0; i < 10; i++ {
				renewTime := t0.Add(time.Duration(i)*10*time.Second + skew)
				o := tr.observe("a", renewTime.Format(time.RFC3339Nano), 40*time.Second, v1alpha1.Advertised{MayRequeue: true}, t0.Add(time.Duration(i)*10*time.Second))
				if v := judge(o, t0.Add(time.Duration(i)*10*time.Second).Sub(o.at), LeaseSettings{Duration: 40 * time.Second}, false, false, policy{}); v.reason != v1alpha1.ReasonHeartbeatFresh {
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
	tr := newTracker(t0)
	for _, n := range []string{"a", "b", "c"} {
		tr.observe(n, "1", 40*time.Second, v1alpha1.Advertised{}, t0)
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
			tr.observe(n, string(rune('0'+version)), 40*time.Second, v1alpha1.Advertised{}, now)
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
