package controller

// The placement room: the plan's jobs laid out on the hosts (per pair, samplers
// once a host), each instance's spec, its series and who may send them.

import (
	"strconv"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/runners"
	"github.com/bloatbench/bloatbench/tests"
)

// instance is a planned job on one host: a job of role bottleneck runs on every
// bottleneck host, a job of a client or server role once for each pair.
type instance struct {
	job tests.Job
	// name is the job's name on its agent and in the log: the plan's, with the
	// pair in a run with several.
	name string
	// pair is the job's pair in a run with several ("1", "2", ...), else "";
	// pairIndex is the pair (from 0) whose hosts its target and peer are.
	pair      string
	pairIndex int
	ep        *endpoint
	spec      runners.JobSpec
	// series are the job's planned series with their hosts and targets filled in;
	// from[i] is the endpoint whose agent sends series[i]'s samples: the job's own,
	// or for a series of its peer (an upload's receiver) the peer's.
	series []datafile.Series
	from   []*endpoint
	// at is when it starts, on the controller's clock.
	at time.Time
}

// pairEnds are the endpoints of each pair's client and server.
type pairEnds struct{ client, server *endpoint }

// pairsOf finds each of the inventory's pairs among the endpoints.
func (o *Options) pairsOf(eps []*endpoint) []pairEnds {
	var out []pairEnds
	for _, p := range o.Inventory.PairsOf() {
		out = append(out, pairEnds{endpointOf(eps, p.Client), endpointOf(eps, p.Server)})
	}
	return out
}

// role is the pair's endpoint of a client or server role.
func (p pairEnds) role(role string) *endpoint {
	switch role {
	case tests.RoleClient:
		return p.client
	case tests.RoleServer:
		return p.server
	}
	return nil
}

// pairLabel names pair k (from 0) of n: "" when the run has one.
func pairLabel(k, n int) string {
	if n < 2 {
		return ""
	}
	return strconv.Itoa(k + 1)
}

// instanceName is a job's name on its agent and in the log.
func instanceName(job, pair string) string {
	if pair == "" {
		return job
	}
	return job + "/" + pair
}

// instances lays the plan's jobs out on the hosts, t0 being start. The controller
// fills in what every kind shares (when, where, which devices, which pair); the
// kind's own parameters pass through as the test planned them.
func (o *Options) instances(eps []*endpoint, start time.Time, token string) []instance {
	timing := tests.Timing{Delay: o.Delay.Seconds(), Length: o.Length.Seconds()}
	devs := map[string][]runners.Dev{}
	var watched []string
	ifb := o.Setup != nil && o.Setup.Ingress != nil
	changed := o.Setup != nil && o.Setup.TouchesBottleneck()
	for _, b := range o.Inventory.Bottleneck {
		if devs[b.Host] == nil {
			watched = append(watched, b.Host)
		}
		devs[b.Host] = append(devs[b.Host], runners.Dev{Name: b.Dev, Changed: changed})
	}
	if ifb {
		for _, b := range o.Inventory.Bottleneck {
			devs[b.Host] = append(devs[b.Host], runners.Dev{Name: qdisc.IFBName(b.Dev), IFB: true, Changed: true})
		}
	}
	pairs := o.pairsOf(eps)
	roleOf := map[string]string{} // a job's name to its host's role
	kinds := runners.Kinds()
	// A sampler runs once on a host, however many roles name it (cpu@server and
	// cpu@bottleneck on a server that is a bottleneck, the servers of several
	// pairs): two would write one series twice.
	sampled := map[string]bool{}
	var out []instance
	for _, j := range o.Plan.Jobs {
		type place struct {
			ep   *endpoint
			pair int // the pair whose target and peer it takes
		}
		var on []place
		perPair := false
		switch j.Host {
		case tests.RoleBottleneck:
			for _, h := range watched {
				on = append(on, place{endpointOf(eps, h), 0})
			}
		case tests.RoleAll:
			for _, ep := range eps { // one endpoint a host
				on = append(on, place{ep, 0})
			}
		default:
			perPair = !kinds[j.Kind].Sampler
			for k, p := range pairs {
				on = append(on, place{p.role(j.Host), k})
			}
		}
		roleOf[j.Name] = j.Host
		peer := j.Target
		if j.Connect != "" {
			peer = roleOf[j.Connect]
		}
		at := start.Add(time.Duration(j.Start.Eval(timing) * float64(time.Second)))
		for _, pl := range on {
			ep, pe := pl.ep, pairs[pl.pair]
			key := j.Kind + "\x00" + ep.host.Name
			if kinds[j.Kind].Sampler && sampled[key] {
				continue
			}
			sampled[key] = true
			pair := ""
			if perPair {
				pair = pairLabel(pl.pair, len(pairs))
			}
			in := instance{job: j, name: instanceName(j.Name, pair), pair: pair, pairIndex: pl.pair, ep: ep, at: at, spec: runners.JobSpec{Kind: j.Kind, Start: agentTime(ep, at),
				Step: o.Step.Seconds(), Token: token, Host: ep.host.Name, Devs: devs[ep.host.Name], Pair: pair, Params: j.Params}}
			if !j.Background {
				in.spec.Duration = j.Duration.Eval(timing)
			}
			if t := pe.role(j.Target); t != nil {
				in.spec.Target = t.host.TestIP
			}
			if pep := pe.role(peer); pep != nil {
				in.spec.PeerOffset = pep.info.ClockOffset - ep.info.ClockOffset
				in.spec.PeerOffsetErr = (pep.info.ClockRTT + ep.info.ClockRTT) / 2
			}
			for _, se := range j.Series {
				from := in.ep
				switch se.Host {
				case "":
					se.Host = j.Host
				case datafile.HostPeer:
					se.Host = peer
					if pep := pe.role(peer); pep != nil {
						from = pep
					}
				}
				if se.Target == "" && j.Connect == "" && in.spec.Target != "" {
					se.Target = in.spec.Target
				}
				se.Name, se.Pair = datafile.PairName(se.Name, pair), pair
				if in.spec.Duration > 0 {
					se.Start, se.Duration = j.Start.Eval(timing), in.spec.Duration
				}
				in.series = append(in.series, se)
				in.from = append(in.from, from)
			}
			out = append(out, in)
		}
	}
	// A listener learns what its clients (of its pair) will ask of it, so that
	// it answers nothing else from the test network.
	at := map[string]int{}
	for i, in := range out {
		at[in.name] = i
	}
	for _, in := range out {
		if in.job.Connect == "" {
			continue
		}
		if i, ok := at[instanceName(in.job.Connect, in.pair)]; ok {
			out[i].spec.Clients = append(out[i].spec.Clients, runners.Client{Kind: in.job.Kind, Duration: in.spec.Duration, Params: in.spec.Params})
		}
	}
	return out
}

// jobRole is the host role of the plan's job of that name.
func (o *Options) jobRole(name string) string {
	for _, j := range o.Plan.Jobs {
		if j.Name == name {
			return j.Host
		}
	}
	return ""
}

// agentTime is controller time t on ep's agent's clock, in a spec's Unix seconds.
func agentTime(ep *endpoint, t time.Time) float64 {
	return datafile.Unix(t) + ep.info.ClockOffset
}
