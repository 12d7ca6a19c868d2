package main

// Scenario events: posted through govmomi's EventManager (PostEvent keys them, formats their message and
// runs the alarms), then kept in a log of the simulator's own that the event history collectors read.
// govmomi's EventManager keeps only the newest 1,000 events (its history is pruned at its largest page
// size, simulator/history_collector.go) where vCenter keeps all of its retention (30 days by default):
// a client reading a long log in pages would lose what the simulator dropped. So CreateCollectorForEvents
// is answered here, with a collector that reads the whole log forward from the filter's begin time, is
// appended to as events are posted, and refuses what vCenter refuses (maxCount outside 1..1000, a 33rd
// collector on one session).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

const (
	maxEventPage       = 1000 // vCenter's range for ReadNextEvents' maxCount
	maxEventCollectors = 32   // vCenter's default event.maxCollectors per session
)

// EventSpec is one scenario event (README.md, "Events").
type EventSpec struct {
	Type            string            `json:"type"`
	ID              string            `json:"id"`
	AgoS            float64           `json:"ago_s"`
	VM              string            `json:"vm"`
	Host            string            `json:"host"`
	Datastore       string            `json:"datastore"`
	SourceHost      string            `json:"source_host"`
	SourceDatastore string            `json:"source_datastore"`
	Arguments       map[string]string `json:"arguments"`
	Message         string            `json:"message"`
	Severity        string            `json:"severity"`
	Task            string            `json:"task"`
	Config          *ReconfigSpec     `json:"config"`
	Alarm           string            `json:"alarm"`
	From            string            `json:"from"`
	To              string            `json:"to"`
	User            string            `json:"user"`
}

// ReconfigSpec is a VmReconfiguredEvent's configSpec: what the reconfiguration asked for.
type ReconfigSpec struct {
	NumCPUs             int32      `json:"num_cpus"`
	MemoryMB            int64      `json:"memory_mb"`
	CPUReservationMhz   *int64     `json:"cpu_reservation_mhz"`
	MemoryReservationMB *int64     `json:"memory_reservation_mb"`
	Disks               []DiskEdit `json:"disks"`
}

// DiskEdit is one virtual disk a reconfiguration adds, resizes (edit) or removes.
type DiskEdit struct {
	Label     string `json:"label"`
	SizeGB    int64  `json:"size_gb"`
	Operation string `json:"operation"`
}

type logEntry struct {
	at    time.Time
	key   int32
	names []string // its type, the types it extends, and an EventEx's or ExtendedEvent's eventTypeId
	event types.BaseEvent
}

func (e *logEntry) after(at time.Time, key int32) bool {
	return e.at.After(at) || (e.at.Equal(at) && e.key > key)
}

// EventLog is the simulator's whole event log and what answers for the EventManager.
type EventLog struct {
	reg     *simulator.Registry
	mgr     *simulator.EventManager
	mu      sync.Mutex
	entries []*logEntry
	open    map[string]int // collectors per session key
}

func newEventLog(reg *simulator.Registry) *EventLog {
	return &EventLog{reg: reg, mgr: reg.EventManager(), open: map[string]int{}}
}

// context is what the simulator's own calls run with: govmomi's PostEvent needs a session.
func (l *EventLog) context() *simulator.Context {
	return &simulator.Context{Context: context.Background(), Map: l.reg,
		Session: &simulator.Session{UserSession: types.UserSession{Key: "vsphere-sim-events", UserName: "vsphere-sim"},
			Registry: simulator.NewRegistry(), Map: l.reg}}
}

// post posts an event through govmomi's EventManager, then keeps it, created at `at`.
func (l *EventLog) post(ctx *simulator.Context, ev types.BaseEvent, at time.Time, user string) {
	ctx.WithLock(l.mgr, func() { l.mgr.PostEvent(ctx, &types.PostEvent{EventToPost: ev}) })
	e := ev.GetEvent()
	e.CreatedTime = at
	e.UserName = user // PostEvent's is the posting session's; vCenter's own events (DRS, HA, ESXi's) name none
	entry := &logEntry{at: at, key: e.Key, names: eventNames(ev), event: ev}
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].after(at, e.Key) })
	l.entries = append(l.entries, nil)
	copy(l.entries[i+1:], l.entries[i:])
	l.entries[i] = entry
}

// eventNames: the event's type and those it extends (a filter naming a base type takes it, as govmomi's
// collector does), and its eventTypeId.
func eventNames(ev types.BaseEvent) []string {
	var names []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		names = append(names, t.Name())
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeOf(ev).Elem())
	switch x := ev.(type) {
	case *types.EventEx:
		names = append(names, x.EventTypeId)
	case *types.ExtendedEvent:
		names = append(names, x.EventTypeId)
	}
	return names
}

// eventManager is what a session's calls on the EventManager reach: govmomi's, but for the collectors.
type eventManager struct {
	*simulator.EventManager
	log *EventLog
}

// session puts the session's view of the EventManager in its registry, which the simulator asks first.
func (l *EventLog) session(ctx *simulator.Context) {
	ref := l.mgr.Reference()
	if ctx.Session != nil && ctx.Session.Registry.Get(ref) == nil {
		ctx.Session.Registry.Put(&eventManager{EventManager: l.mgr, log: l})
	}
}

func (m *eventManager) PostEvent(ctx *simulator.Context, req *types.PostEvent) soap.HasFault {
	m.log.post(ctx, req.EventToPost, time.Now(), ctx.Session.UserName) // as vCenter does: the posting session's
	return &methods.PostEventBody{Res: new(types.PostEventResponse)}
}

func (m *eventManager) CreateCollectorForEvents(ctx *simulator.Context, req *types.CreateCollectorForEvents) soap.HasFault {
	body := new(methods.CreateCollectorForEventsBody)
	f := req.Filter
	if f.MaxCount < 0 || f.MaxCount > maxEventPage {
		body.Fault_ = simulator.Fault("", &types.InvalidArgument{InvalidProperty: "maxCount"})
		return body
	}
	if f.Entity != nil || f.UserName != nil || f.EventChainId != 0 || f.Alarm != nil || len(f.Category) > 0 {
		body.Fault_ = simulator.Fault("vsphere-sim filters events by type and time only", new(types.NotImplemented))
		return body
	}
	l := m.log
	l.mu.Lock()
	if l.open[ctx.Session.Key] >= maxEventCollectors {
		l.mu.Unlock()
		body.Fault_ = simulator.Fault("Too many event collectors to create", new(types.InvalidState))
		return body
	}
	l.open[ctx.Session.Key]++
	l.mu.Unlock()
	c := &EventCollector{log: l, types: map[string]bool{}, session: ctx.Session.Key}
	c.Self.Type = "EventHistoryCollector"
	c.Filter = f
	for _, t := range f.EventTypeId {
		c.types[t] = true
	}
	if f.Time != nil {
		c.begin, c.end = f.Time.BeginTime, f.Time.EndTime
	}
	body.Res = &types.CreateCollectorForEventsResponse{Returnval: ctx.Session.Put(c).Reference()}
	return body
}

// EventCollector reads the log forward from its filter's begin time, events posted after it was made too.
type EventCollector struct {
	mo.EventHistoryCollector
	log        *EventLog
	types      map[string]bool
	begin, end *time.Time
	session    string
	posAt      time.Time // the last entry scanned
	posKey     int32
	started    bool
}

func (c *EventCollector) matches(e *logEntry) bool {
	if c.begin != nil && e.at.Before(*c.begin) || c.end != nil && e.at.After(*c.end) {
		return false
	}
	if len(c.types) == 0 {
		return true
	}
	for _, n := range e.names {
		if c.types[n] {
			return true
		}
	}
	return false
}

func (c *EventCollector) ReadNextEvents(ctx *simulator.Context, req *types.ReadNextEvents) soap.HasFault {
	body := new(methods.ReadNextEventsBody)
	if req.MaxCount <= 0 || req.MaxCount > maxEventPage {
		body.Fault_ = simulator.Fault("", &types.InvalidArgument{InvalidProperty: "maxCount"})
		return body
	}
	body.Res = new(types.ReadNextEventsResponse)
	l := c.log
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	if c.started {
		i = sort.Search(len(l.entries), func(i int) bool { return l.entries[i].after(c.posAt, c.posKey) })
	}
	for ; i < len(l.entries) && len(body.Res.Returnval) < int(req.MaxCount); i++ {
		e := l.entries[i]
		c.posAt, c.posKey, c.started = e.at, e.key, true
		if c.matches(e) {
			body.Res.Returnval = append(body.Res.Returnval, e.event)
		}
	}
	return body
}

func (c *EventCollector) DestroyCollector(ctx *simulator.Context, req *types.DestroyCollector) soap.HasFault {
	ctx.Session.Remove(ctx, req.This)
	c.log.mu.Lock()
	c.log.open[c.session]--
	c.log.mu.Unlock()
	return &methods.DestroyCollectorBody{Res: new(types.DestroyCollectorResponse)}
}

// --- scenario events ---------------------------------------------------------------------------

// refs finds the scenario's entities by name for the events that name them.
type refs struct {
	reg *simulator.Registry
	dc  *types.DatacenterEventArgument
}

func (r refs) entity(kind, name string) (types.ManagedObjectReference, error) {
	for _, e := range r.reg.All(kind) {
		if e.Entity().Name == name {
			return e.Reference(), nil
		}
	}
	return types.ManagedObjectReference{}, fmt.Errorf("no %s named %q", kind, name)
}

// argument is the event argument `wrap` makes of the entity of `kind` named `name`; nil for no name.
func argument[T any](r refs, kind, name string, wrap func(types.EntityEventArgument, types.ManagedObjectReference) *T) (*T, error) {
	if name == "" {
		return nil, nil
	}
	ref, err := r.entity(kind, name)
	if err != nil {
		return nil, err
	}
	return wrap(types.EntityEventArgument{Name: name}, ref), nil
}

func (r refs) host(name string) (*types.HostEventArgument, error) {
	return argument(r, "HostSystem", name, func(e types.EntityEventArgument, ref types.ManagedObjectReference) *types.HostEventArgument {
		return &types.HostEventArgument{EntityEventArgument: e, Host: ref}
	})
}

func (r refs) datastore(name string) (*types.DatastoreEventArgument, error) {
	return argument(r, "Datastore", name, func(e types.EntityEventArgument, ref types.ManagedObjectReference) *types.DatastoreEventArgument {
		return &types.DatastoreEventArgument{EntityEventArgument: e, Datastore: ref}
	})
}

// event makes the vim event a scenario event describes, with the entity arguments vCenter gives its type.
func (r refs) event(s EventSpec) (types.BaseEvent, error) {
	base := types.Event{Datacenter: r.dc, FullFormattedMessage: s.Message}
	var err error
	if base.Host, err = r.host(s.Host); err != nil {
		return nil, err
	}
	if base.Ds, err = r.datastore(s.Datastore); err != nil {
		return nil, err
	}
	var vm *types.ManagedObjectReference
	if s.VM != "" {
		ref, err := r.entity("VirtualMachine", s.VM)
		if err != nil {
			return nil, err
		}
		vm = &ref
		base.Vm = &types.VmEventArgument{EntityEventArgument: types.EntityEventArgument{Name: s.VM}, Vm: ref}
		if base.Host == nil { // vCenter names the VM's host in its events
			if h := r.reg.Get(ref).(*simulator.VirtualMachine).Runtime.Host; h != nil {
				name := r.reg.Get(*h).(*simulator.HostSystem).Name
				base.Host = &types.HostEventArgument{EntityEventArgument: types.EntityEventArgument{Name: name}, Host: *h}
			}
		}
	}
	if base.Host != nil { // and the host's cluster (or standalone compute resource), as vCenter does
		if parent := r.reg.Get(base.Host.Host).(*simulator.HostSystem).Parent; parent != nil {
			if cr, ok := r.reg.Get(*parent).(mo.Entity); ok {
				base.ComputeResource = &types.ComputeResourceEventArgument{
					EntityEventArgument: types.EntityEventArgument{Name: cr.Entity().Name}, ComputeResource: *parent}
			}
		}
	}
	vmEvent := types.VmEvent{Event: base}
	source, err := r.host(s.SourceHost)
	if err != nil {
		return nil, err
	}
	sourceDs, err := r.datastore(s.SourceDatastore)
	if err != nil {
		return nil, err
	}
	migrated := func() types.VmMigratedEvent {
		m := types.VmMigratedEvent{VmEvent: vmEvent, SourceDatacenter: r.dc, SourceDatastore: sourceDs}
		if source != nil {
			m.SourceHost = *source
		}
		return m
	}
	switch s.Type {
	case "VmMigratedEvent":
		m := migrated()
		return &m, nil
	case "DrsVmMigratedEvent":
		return &types.DrsVmMigratedEvent{VmMigratedEvent: migrated()}, nil
	case "VmRelocatedEvent":
		m := types.VmRelocatedEvent{VmRelocateSpecEvent: types.VmRelocateSpecEvent{VmEvent: vmEvent},
			SourceDatacenter: r.dc, SourceDatastore: sourceDs}
		if source != nil {
			m.SourceHost = *source
		}
		return &m, nil
	case "VmRestartedOnAlternateHostEvent":
		m := types.VmRestartedOnAlternateHostEvent{VmPoweredOnEvent: types.VmPoweredOnEvent{VmEvent: vmEvent}}
		if source != nil {
			m.SourceHost = *source
		}
		return &m, nil
	case "DasHostFailedEvent":
		if base.Host == nil {
			return nil, fmt.Errorf("DasHostFailedEvent needs \"host\" (the host that failed)")
		}
		failed := *base.Host
		return &types.DasHostFailedEvent{ClusterEvent: types.ClusterEvent{Event: base}, FailedHost: failed}, nil
	case "VmPoweredOnEvent":
		return &types.VmPoweredOnEvent{VmEvent: vmEvent}, nil
	case "VmPoweredOffEvent":
		return &types.VmPoweredOffEvent{VmEvent: vmEvent}, nil
	case "EnteredMaintenanceModeEvent":
		return &types.EnteredMaintenanceModeEvent{HostEvent: types.HostEvent{Event: base}}, nil
	case "ExitMaintenanceModeEvent":
		return &types.ExitMaintenanceModeEvent{HostEvent: types.HostEvent{Event: base}}, nil
	case "HostConnectionLostEvent":
		return &types.HostConnectionLostEvent{HostEvent: types.HostEvent{Event: base}}, nil
	case "VmReconfiguredEvent":
		if s.Config == nil {
			return nil, fmt.Errorf("VmReconfiguredEvent needs \"config\"")
		}
		return &types.VmReconfiguredEvent{VmEvent: vmEvent, ConfigSpec: reconfigSpec(*s.Config)}, nil
	case "TaskEvent":
		if s.Task == "" || vm == nil {
			return nil, fmt.Errorf("TaskEvent needs \"task\" (its descriptionId) and \"vm\"")
		}
		return &types.TaskEvent{Event: base, Info: types.TaskInfo{Key: "task-sim", Task: types.ManagedObjectReference{
			Type: "Task", Value: "task-sim"}, DescriptionId: s.Task, Entity: vm, EntityName: s.VM,
			State: types.TaskInfoStateRunning, Reason: taskReason(s.User)}}, nil
	case "AlarmStatusChangedEvent":
		target, name := types.ManagedObjectReference{}, s.VM
		switch {
		case vm != nil:
			target = *vm
		case base.Host != nil:
			target, name = base.Host.Host, s.Host
		case base.Ds != nil:
			target, name = base.Ds.Datastore, s.Datastore
		default:
			return nil, fmt.Errorf("AlarmStatusChangedEvent needs a \"vm\", \"host\" or \"datastore\"")
		}
		entity := types.ManagedEntityEventArgument{EntityEventArgument: types.EntityEventArgument{Name: name},
			Entity: target}
		return &types.AlarmStatusChangedEvent{AlarmEvent: types.AlarmEvent{Event: base, Alarm: types.AlarmEventArgument{
			EntityEventArgument: types.EntityEventArgument{Name: s.Alarm},
			Alarm:               types.ManagedObjectReference{Type: "Alarm", Value: "alarm-sim"}}},
			Source: entity, Entity: entity, From: s.From, To: s.To}, nil
	case "EventEx":
		if s.ID == "" {
			return nil, fmt.Errorf("EventEx needs \"id\" (its eventTypeId)")
		}
		ex := &types.EventEx{Event: base, EventTypeId: s.ID, Severity: s.Severity}
		switch { // the entity it is about (govmomi's alarm manager matches EventEx alarms on it)
		case base.Host != nil:
			ex.ObjectId, ex.ObjectType, ex.ObjectName = base.Host.Host.Value, "HostSystem", base.Host.Name
		case vm != nil:
			ex.ObjectId, ex.ObjectType, ex.ObjectName = vm.Value, "VirtualMachine", s.VM
		case base.Ds != nil:
			ex.ObjectId, ex.ObjectType, ex.ObjectName = base.Ds.Datastore.Value, "Datastore", s.Datastore
		default:
			return nil, fmt.Errorf("EventEx needs a \"host\", \"vm\" or \"datastore\"")
		}
		keys := make([]string, 0, len(s.Arguments))
		for k := range s.Arguments {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ex.Arguments = append(ex.Arguments, types.KeyAnyValue{Key: k, Value: s.Arguments[k]})
		}
		return ex, nil
	}
	return nil, fmt.Errorf("event type %q is not one vsphere-sim makes (README.md, \"Events\")", s.Type)
}

func reconfigSpec(c ReconfigSpec) types.VirtualMachineConfigSpec {
	spec := types.VirtualMachineConfigSpec{NumCPUs: c.NumCPUs, MemoryMB: c.MemoryMB}
	if c.CPUReservationMhz != nil {
		spec.CpuAllocation = &types.ResourceAllocationInfo{Reservation: c.CPUReservationMhz}
	}
	if c.MemoryReservationMB != nil {
		spec.MemoryAllocation = &types.ResourceAllocationInfo{Reservation: c.MemoryReservationMB}
	}
	for i, d := range c.Disks {
		op := types.VirtualDeviceConfigSpecOperation(d.Operation)
		if op == "" {
			op = types.VirtualDeviceConfigSpecOperationEdit
		}
		unit := int32(i + 1)
		disk := &types.VirtualDisk{VirtualDevice: types.VirtualDevice{Key: int32(2001 + i), ControllerKey: 1000,
			UnitNumber: &unit, DeviceInfo: &types.Description{Label: d.Label, Summary: fmt.Sprintf("%d GB", d.SizeGB)}},
			CapacityInKB: d.SizeGB * gib / 1024, CapacityInBytes: d.SizeGB * gib}
		spec.DeviceChange = append(spec.DeviceChange, &types.VirtualDeviceConfigSpec{Operation: op, Device: disk})
	}
	return spec
}

// postScenario posts the scenario's events and the generated ones.
// taskReason: a task a user started names them; one without is vCenter's own.
func taskReason(user string) types.BaseTaskReason {
	if user == "" {
		return &types.TaskReasonSystem{}
	}
	return &types.TaskReasonUser{UserName: user}
}

func (l *EventLog) postScenario(sc *Scenario) (refs, error) {
	r := refs{reg: l.reg}
	if dcs := l.reg.All("Datacenter"); len(dcs) > 0 {
		r.dc = &types.DatacenterEventArgument{EntityEventArgument: types.EntityEventArgument{Name: dcs[0].Entity().Name},
			Datacenter: dcs[0].Reference()}
	}
	return r, l.postAll(r, append(generated(sc.Generate.Events, sc.Hosts), sc.Events...), time.Now())
}

// postAll posts scenario events, oldest first, each `ago_s` before `now`.
func (l *EventLog) postAll(r refs, specs []EventSpec, now time.Time) error {
	order := make([]EventSpec, len(specs))
	copy(order, specs)
	sort.SliceStable(order, func(i, j int) bool { return order[i].AgoS > order[j].AgoS })
	ctx := l.context()
	for _, s := range order {
		ev, err := r.event(s)
		if err != nil {
			return fmt.Errorf("event %s: %w", s.Type, err)
		}
		l.post(ctx, ev, now.Add(-time.Duration(s.AgoS*float64(time.Second))), s.User)
	}
	return nil
}

// generated is `n` events spread over the last 50 minutes (within a first start's hour), oldest first,
// cycling through a DRS migration, an alarm change, a device latency event and a reconfiguration of the
// scenario's VMs and hosts: a long log.
func generated(n int, hosts []HostSpec) []EventSpec {
	var vms []EventSpec
	for i, h := range hosts {
		next := hosts[(i+1)%len(hosts)].Name
		for _, v := range h.VMs {
			vms = append(vms, EventSpec{VM: v.Name, Host: h.Name, SourceHost: next})
		}
	}
	out := make([]EventSpec, 0, n)
	if len(vms) == 0 {
		return out
	}
	for i := 0; i < n; i++ {
		e := vms[i%len(vms)]
		e.AgoS = 3000 * float64(n-i) / float64(n+1)
		switch i % 4 {
		case 0:
			e.Type = "DrsVmMigratedEvent"
		case 1:
			e.Type, e.Alarm, e.From, e.To, e.SourceHost = "AlarmStatusChangedEvent", "Virtual machine CPU usage", "green", "yellow", ""
		case 2:
			e.Type, e.ID, e.VM, e.SourceHost = "EventEx", "esx.problem.scsi.device.io.latency.high", "", ""
			e.Arguments = map[string]string{"1": "naa.60000000000000000000000000000001", "2": "1200", "3": "28000"}
		case 3:
			e.Type, e.SourceHost = "VmReconfiguredEvent", ""
			e.Config = &ReconfigSpec{NumCPUs: 8}
		}
		out = append(out, e)
	}
	return out
}

// serveHTTP posts the events of a JSON list of scenario events (POST /sim/events): each `ago_s` before now.
func (l *EventLog) serveHTTP(r refs) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			http.Error(w, "POST a JSON list of events", http.StatusMethodNotAllowed)
			return
		}
		var specs []EventSpec
		dec := json.NewDecoder(req.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&specs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := l.postAll(r, specs, time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int{"posted": len(specs)})
	}
}
