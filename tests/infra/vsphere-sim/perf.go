package main

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

const (
	realtime      = 20       // seconds between realtime samples
	realtimeKeep  = 3600     // vCenter keeps one hour of realtime samples
	historicKeep  = 86400    // and we serve a day of any longer interval
	fallbackValue = int64(0) // counters with neither a scenario value nor a default
)

// PerfMgr replaces the stock PerformanceManager's QueryPerf and QueryAvailablePerfMetric:
// values come from the scenario, samples are oldest first on a 20 s grid, zeros stay
// aligned with their timestamps, and "*" expands to exactly the instances that
// QueryAvailablePerfMetric lists.
type PerfMgr struct {
	*simulator.PerformanceManager
	byName          map[string]int32
	names           map[int32]string
	entities        map[string]*entityPerf
	anchor          int64 // unix seconds of the newest sample at start: list values end here
	maxQueryMetrics int
	mu              sync.Mutex // guards entities while the inventory is built
}

// entityPerf is what one VM or host can report: counter -> instance -> series.
type entityPerf struct {
	series map[int32]map[string]Series
	avail  []types.PerfMetricId
}

func newPerfMgr(pm *simulator.PerformanceManager, maxQueryMetrics int) *PerfMgr {
	p := &PerfMgr{PerformanceManager: pm, byName: map[string]int32{}, names: map[int32]string{},
		entities: map[string]*entityPerf{}, anchor: time.Now().Unix() / realtime * realtime,
		maxQueryMetrics: maxQueryMetrics}
	for _, c := range pm.PerfCounter {
		name := c.GroupInfo.GetElementDescription().Key + "." + c.NameInfo.GetElementDescription().Key + "." + string(c.RollupType)
		p.byName[name] = c.Key
		p.names[c.Key] = name
	}
	return p
}

// define registers the counters of one entity: instances per counter, then scenario values.
func (p *PerfMgr) define(ref types.ManagedObjectReference, instances map[string][]string, defaults map[string]int64,
	perf map[string]PerfSpec) error {
	e := &entityPerf{series: map[int32]map[string]Series{}}
	set := func(name, inst string, s Series) {
		key, ok := p.byName[name]
		if !ok {
			return
		}
		if e.series[key] == nil {
			e.series[key] = map[string]Series{}
		}
		e.series[key][inst] = s
	}
	for name, insts := range instances {
		for _, inst := range insts {
			set(name, inst, Series{defaultFor(defaults, name, inst)})
		}
	}
	for name, spec := range perf {
		if _, ok := p.byName[name]; !ok {
			return &unknownCounter{name}
		}
		for inst, s := range spec {
			set(name, inst, s)
		}
	}
	for key, byInst := range e.series {
		for inst := range byInst {
			e.avail = append(e.avail, types.PerfMetricId{CounterId: key, Instance: inst})
		}
	}
	sort.Slice(e.avail, func(i, j int) bool {
		a, b := e.avail[i], e.avail[j]
		return a.CounterId < b.CounterId || a.CounterId == b.CounterId && a.Instance < b.Instance
	})
	p.mu.Lock()
	p.entities[ref.Value] = e
	p.mu.Unlock()
	return nil
}

type unknownCounter struct{ name string }

func (u *unknownCounter) Error() string {
	return "perf counter " + strconv.Quote(u.name) + " does not exist (names are group.name.rollup)"
}

func defaultFor(defaults map[string]int64, name, inst string) int64 {
	if v, ok := defaults[name+"|"+inst]; ok {
		return v
	}
	if v, ok := defaults[name]; ok {
		return v
	}
	return fallbackValue
}

// at is the value of a series at sample time ts (unix seconds).
func (p *PerfMgr) at(s Series, ts int64, step int64) int64 {
	k := (p.anchor - ts) / step
	if k < 0 {
		return s[len(s)-1]
	}
	idx := int64(len(s)) - 1 - k
	if idx < 0 {
		idx = 0
	}
	return s[idx]
}

func (p *PerfMgr) QueryAvailablePerfMetric(ctx *simulator.Context, req *types.QueryAvailablePerfMetric) soap.HasFault {
	body := new(methods.QueryAvailablePerfMetricBody)
	body.Res = new(types.QueryAvailablePerfMetricResponse)
	if e := p.entities[req.Entity.Value]; e != nil {
		body.Res.Returnval = append([]types.PerfMetricId(nil), e.avail...)
	}
	return body
}

// intSeries is PerfMetricIntSeries without `omitempty` on its values, so a zero sample
// keeps its place beside its timestamp.
type PerfMetricIntSeries struct {
	types.PerfMetricSeries
	Value []int64 `xml:"value"`
}

func (p *PerfMgr) QueryPerf(ctx *simulator.Context, req *types.QueryPerf) soap.HasFault {
	body := new(methods.QueryPerfBody)
	if p.maxQueryMetrics > 0 {
		n := 0
		for _, qs := range req.QuerySpec {
			n += len(qs.MetricId)
		}
		if n > p.maxQueryMetrics {
			body.Fault_ = simulator.Fault("querySpec.size: "+strconv.Itoa(n)+" metrics exceed config.vpxd.stats.maxQueryMetrics="+
				strconv.Itoa(p.maxQueryMetrics), &types.InvalidArgument{InvalidProperty: "querySpec.size"})
			return body
		}
	}
	body.Res = new(types.QueryPerfResponse)
	now := time.Now().Unix()
	for _, qs := range req.QuerySpec {
		e := p.entities[qs.Entity.Value]
		if e == nil {
			if ctx.Map.Get(qs.Entity) == nil {
				body.Res = nil
				body.Fault_ = simulator.Fault("", &types.ManagedObjectNotFound{Obj: qs.Entity})
				return body
			}
			continue // an entity without realtime stats: no result, as vCenter
		}
		step := int64(qs.IntervalId)
		if step <= 0 {
			step = realtime
		}
		keep := int64(historicKeep)
		if step == realtime {
			keep = realtimeKeep
		}
		newest := now / step * step
		if qs.EndTime != nil && qs.EndTime.Unix() < newest {
			newest = qs.EndTime.Unix() / step * step
		}
		oldest := newest - keep + step
		if qs.StartTime != nil && qs.StartTime.Unix() >= oldest {
			oldest = qs.StartTime.Unix()/step*step + step // startTime is exclusive
		}
		var stamps []int64
		for ts := oldest; ts <= newest; ts += step {
			stamps = append(stamps, ts)
		}
		if qs.MaxSample > 0 && len(stamps) > int(qs.MaxSample) {
			stamps = stamps[len(stamps)-int(qs.MaxSample):]
		}
		ids := p.expand(e, qs.MetricId)
		if len(stamps) == 0 || len(ids) == 0 {
			continue
		}
		if qs.Format == string(types.PerfFormatCsv) {
			body.Res.Returnval = append(body.Res.Returnval, p.csv(qs.Entity, e, ids, stamps, step))
		} else {
			body.Res.Returnval = append(body.Res.Returnval, p.normal(qs.Entity, e, ids, stamps, step))
		}
	}
	return body
}

// expand resolves "*" (every instance, the aggregate included) and drops metrics the
// entity does not have, as vCenter does.
func (p *PerfMgr) expand(e *entityPerf, want []types.PerfMetricId) []types.PerfMetricId {
	if len(want) == 0 {
		return e.avail
	}
	var out []types.PerfMetricId
	for _, m := range want {
		byInst := e.series[m.CounterId]
		if byInst == nil {
			continue
		}
		if m.Instance == "*" {
			for _, a := range e.avail {
				if a.CounterId == m.CounterId {
					out = append(out, a)
				}
			}
		} else if _, ok := byInst[m.Instance]; ok {
			out = append(out, m)
		}
	}
	return out
}

func (p *PerfMgr) values(e *entityPerf, id types.PerfMetricId, stamps []int64, step int64) []int64 {
	s := e.series[id.CounterId][id.Instance]
	out := make([]int64, len(stamps))
	for i, ts := range stamps {
		out[i] = p.at(s, ts, step)
	}
	return out
}

func (p *PerfMgr) normal(ref types.ManagedObjectReference, e *entityPerf, ids []types.PerfMetricId, stamps []int64, step int64) types.BasePerfEntityMetricBase {
	m := &types.PerfEntityMetric{PerfEntityMetricBase: types.PerfEntityMetricBase{Entity: ref}}
	for _, ts := range stamps {
		m.SampleInfo = append(m.SampleInfo, types.PerfSampleInfo{Timestamp: time.Unix(ts, 0).UTC(), Interval: int32(step)})
	}
	for _, id := range ids {
		m.Value = append(m.Value, &PerfMetricIntSeries{PerfMetricSeries: types.PerfMetricSeries{Id: id},
			Value: p.values(e, id, stamps, step)})
	}
	return m
}

func (p *PerfMgr) csv(ref types.ManagedObjectReference, e *entityPerf, ids []types.PerfMetricId, stamps []int64, step int64) types.BasePerfEntityMetricBase {
	m := &types.PerfEntityMetricCSV{PerfEntityMetricBase: types.PerfEntityMetricBase{Entity: ref}}
	info := make([]string, 0, 2*len(stamps))
	for _, ts := range stamps {
		info = append(info, strconv.FormatInt(step, 10), time.Unix(ts, 0).UTC().Format(time.RFC3339))
	}
	m.SampleInfoCSV = strings.Join(info, ",")
	for _, id := range ids {
		vals := p.values(e, id, stamps, step)
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = strconv.FormatInt(v, 10)
		}
		m.Value = append(m.Value, types.PerfMetricSeriesCSV{PerfMetricSeries: types.PerfMetricSeries{Id: id},
			Value: strings.Join(parts, ",")})
	}
	return m
}
