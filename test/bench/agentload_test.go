package bench

import (
	"fmt"
	"time"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// agentLoad measures, over one round, the requests the agents sent to
// their systems (trainyard_agent_remote_requests_total, counted by the
// agents' transports) per second, and per running job: the rate over the
// mean number of jobs running, sampled by the round's wait loop.
type agentLoad struct {
	system        string
	t0            time.Time
	before        float64
	sum, nSamples float64
}

func startAgentLoad(system string) *agentLoad {
	return &agentLoad{system: system, t0: time.Now(), before: remoteRequests(system)}
}

// sample records how many jobs run now.
func (l *agentLoad) sample(running int) {
	l.sum += float64(running)
	l.nSamples++
}

// cell is "requests/s (per running job)" since the start.
func (l *agentLoad) cell() string {
	rate := (remoteRequests(l.system) - l.before) / time.Since(l.t0).Seconds()
	if l.nSamples == 0 || l.sum == 0 {
		return fmt.Sprintf("%.1f/s", rate)
	}
	mean := l.sum / l.nSamples
	return fmt.Sprintf("%.1f/s (%.2f per running job, %.1f running)", rate, rate/mean, mean)
}

// remoteRequests sums the agents' request counter for system.
func remoteRequests(system string) float64 {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "trainyard_agent_remote_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, map[string]string{"system": system}) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
