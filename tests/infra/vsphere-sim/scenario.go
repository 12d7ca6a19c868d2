package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/vmware/govmomi/vim25/types"
)

// Scenario is the JSON file the simulator serves (see README.md beside this file).
// LoginSpec is the one user the simulator accepts (any non-empty user and password without it).
type LoginSpec struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

type Scenario struct {
	Datacenter      string          `json:"datacenter"`
	Generate        GenerateSpec    `json:"generate"`
	MaxQueryMetrics int             `json:"max_query_metrics"`
	Login           *LoginSpec      `json:"login"`
	Version         string          `json:"version"` // the vCenter's (or --esx host's) version and API version
	Datastores      []DatastoreSpec `json:"datastores"`
	Hosts           []HostSpec      `json:"hosts"`
	Events          []EventSpec     `json:"events"`
}

type GenerateSpec struct {
	Hosts      int `json:"hosts"`
	VMsPerHost int `json:"vms_per_host"`
	Events     int `json:"events"`
}

type DatastoreSpec struct {
	Name       string   `json:"name"`
	Type       string   `json:"type"`
	CapacityGB int64    `json:"capacity_gb"`
	FreeGB     int64    `json:"free_gb"`
	LUNs       []string `json:"luns"`
}

type LUNSpec struct {
	Name       string `json:"name"`
	Plugin     string `json:"plugin"` // NMP (policy, satp) or HPP (policy is its scheme; no SATP)
	Policy     string `json:"policy"`
	SATP       string `json:"satp"`
	Paths      int    `json:"paths"`
	DeadPaths  int    `json:"dead_paths"`
	QueueDepth int32  `json:"queue_depth"`
}

type HostSpec struct {
	Name           string                     `json:"name"`
	Cluster        string                     `json:"cluster"`
	CPUSockets     int16                      `json:"cpu_sockets"`
	CPUCores       int16                      `json:"cpu_cores"`
	CPUThreads     int16                      `json:"cpu_threads"`
	CPUMhz         int32                      `json:"cpu_mhz"`
	CPUModel       string                     `json:"cpu_model"`
	MemoryMB       int64                      `json:"memory_mb"`
	NUMANodes      int                        `json:"numa_nodes"`
	Hyperthreading *bool                      `json:"hyperthreading"`
	PowerPolicy    string                     `json:"power_policy"`
	Version        string                     `json:"version"`
	Build          string                     `json:"build"`
	MTU            int32                      `json:"mtu"`
	VmknicMTU      int32                      `json:"vmknic_mtu"`
	Datastores     []string                   `json:"datastores"`
	LUNs           []LUNSpec                  `json:"luns"`
	QuickStats     map[string]int64           `json:"quickstats"`
	Perf           map[string]json.RawMessage `json:"perf"`
	VMs            []VMSpec                   `json:"vms"`
}

type DiskSpec struct {
	Datastore string `json:"datastore"`
	SizeGB    int64  `json:"size_gb"`
	Backing   string `json:"backing"` // thin | lazy_zeroed | eager_zeroed | rdm
	LUN       string `json:"lun"`     // for rdm
}

type VMSpec struct {
	Name                   string                     `json:"name"`
	NumCPU                 int32                      `json:"num_cpu"`
	CoresPerSocket         int32                      `json:"cores_per_socket"`
	MemoryMB               int64                      `json:"memory_mb"`
	MemoryReservationMB    int64                      `json:"memory_reservation_mb"`
	MemoryLimitMB          *int64                     `json:"memory_limit_mb"`
	ReservationLockedToMax bool                       `json:"memory_reservation_locked_to_max"`
	CPUReservationMhz      int64                      `json:"cpu_reservation_mhz"`
	CPULimitMhz            *int64                     `json:"cpu_limit_mhz"`
	CPUShares              string                     `json:"cpu_shares"`
	LatencySensitivity     string                     `json:"latency_sensitivity"`
	CPUHotAdd              bool                       `json:"cpu_hot_add"`
	HWVersion              string                     `json:"hw_version"`
	NIC                    string                     `json:"nic"`
	SCSI                   string                     `json:"scsi"`
	Tools                  string                     `json:"tools"`
	ToolsVersionStatus     string                     `json:"tools_version_status"`
	GuestHostname          string                     `json:"guest_hostname"`
	IPs                    []string                   `json:"ips"`
	PowerState             string                     `json:"power_state"`
	SwapPlacement          string                     `json:"swap_placement"`
	Disks                  []DiskSpec                 `json:"disks"`
	QuickStats             map[string]int64           `json:"quickstats"`
	Perf                   map[string]json.RawMessage `json:"perf"`
}

// Series is one perf value spec: a constant or the last N samples, oldest first.
type Series []int64

// PerfSpec maps instance ("" aggregate, "0" vCPU, naa.* LUN, scsi0:0 disk) to a series.
type PerfSpec map[string]Series

func parseSeries(raw json.RawMessage) (Series, bool) {
	var n int64
	if json.Unmarshal(raw, &n) == nil {
		return Series{n}, true
	}
	var f float64
	if json.Unmarshal(raw, &f) == nil {
		return Series{int64(f)}, true
	}
	var list []int64
	if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
		return list, true
	}
	return nil, false
}

func parsePerf(owner string, perf map[string]json.RawMessage) (map[string]PerfSpec, error) {
	out := map[string]PerfSpec{}
	for name, raw := range perf {
		if s, ok := parseSeries(raw); ok {
			out[name] = PerfSpec{"": s}
			continue
		}
		var byInstance map[string]json.RawMessage
		if err := json.Unmarshal(raw, &byInstance); err != nil {
			return nil, fmt.Errorf("%s: perf %q: expected a number, a list of numbers or an object keyed by instance", owner, name)
		}
		spec := PerfSpec{}
		for inst, v := range byInstance {
			s, ok := parseSeries(v)
			if !ok {
				return nil, fmt.Errorf("%s: perf %q instance %q: expected a number or a non-empty list of numbers", owner, name, inst)
			}
			spec[inst] = s
		}
		out[name] = spec
	}
	return out, nil
}

func loadScenario(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sc := &Scenario{}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(sc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dflt(&sc.Datacenter, "DC1")
	for i := 0; i < sc.Generate.Hosts; i++ {
		h := HostSpec{Name: fmt.Sprintf("gen-esx%03d", i), Cluster: fmt.Sprintf("gen-cl%02d", i/10)}
		for j := 0; j < sc.Generate.VMsPerHost; j++ {
			h.VMs = append(h.VMs, VMSpec{Name: fmt.Sprintf("gen-esx%03d-vm%02d", i, j), NumCPU: 4, MemoryMB: 16384,
				Disks: []DiskSpec{{SizeGB: 40}, {SizeGB: 200}}})
		}
		sc.Hosts = append(sc.Hosts, h)
	}
	if len(sc.Datastores) == 0 {
		sc.Datastores = []DatastoreSpec{{Name: "ds01", LUNs: []string{"naa.60000000000000000000000000000001"}}}
	}
	seen := map[string]bool{}
	unique := func(kind, name string) error {
		if name == "" || seen[name] {
			return fmt.Errorf("%s name %q is empty or used twice", kind, name)
		}
		seen[name] = true
		return nil
	}
	for i := range sc.Datastores {
		d := &sc.Datastores[i]
		dflt(&d.Type, "VMFS")
		dflt(&d.CapacityGB, 4096)
		dflt(&d.FreeGB, d.CapacityGB/2)
		if err := unique("datastore", d.Name); err != nil {
			return nil, err
		}
	}
	for i := range sc.Hosts {
		h := &sc.Hosts[i]
		if err := unique("host", h.Name); err != nil {
			return nil, err
		}
		dflt(&h.CPUSockets, 2)
		dflt(&h.CPUCores, 16*h.CPUSockets/2)
		if h.Hyperthreading == nil {
			t := true
			h.Hyperthreading = &t
		}
		if h.CPUThreads == 0 {
			h.CPUThreads = h.CPUCores
			if *h.Hyperthreading {
				h.CPUThreads *= 2
			}
		}
		dflt(&h.CPUMhz, 2600)
		dflt(&h.CPUModel, "Intel(R) Xeon(R) Gold 6242 CPU @ 2.80GHz")
		dflt(&h.MemoryMB, 262144)
		dflt(&h.NUMANodes, int(h.CPUSockets))
		dflt(&h.PowerPolicy, "static")
		dflt(&h.Version, "8.0.2")
		if _, err := types.ParseESXiVersion(h.Version); err != nil {
			return nil, fmt.Errorf("host %s: version: %w", h.Name, err)
		}
		dflt(&h.Build, "22380479")
		dflt(&h.MTU, 9000)
		dflt(&h.VmknicMTU, h.MTU)
		if len(h.Datastores) == 0 {
			for _, d := range sc.Datastores {
				h.Datastores = append(h.Datastores, d.Name)
			}
		}
		for _, d := range h.Datastores {
			if findDatastore(sc, d) == nil {
				return nil, fmt.Errorf("host %s: datastore %q is not in \"datastores\"", h.Name, d)
			}
		}
		for j := range h.VMs {
			vm := &h.VMs[j]
			if err := unique("VM", vm.Name); err != nil {
				return nil, err
			}
			dflt(&vm.NumCPU, 2)
			dflt(&vm.CoresPerSocket, vm.NumCPU)
			dflt(&vm.MemoryMB, 8192)
			dflt(&vm.NIC, "vmxnet3")
			dflt(&vm.SCSI, "pvscsi")
			dflt(&vm.Tools, "guestToolsRunning")
			dflt(&vm.ToolsVersionStatus, "guestToolsCurrent")
			dflt(&vm.HWVersion, "vmx-19")
			dflt(&vm.PowerState, "poweredOn")
			dflt(&vm.LatencySensitivity, "normal")
			dflt(&vm.SwapPlacement, "inherit")
			dflt(&vm.GuestHostname, vm.Name)
			if len(vm.Disks) == 0 {
				vm.Disks = []DiskSpec{{SizeGB: 100}}
			}
			for k := range vm.Disks {
				d := &vm.Disks[k]
				dflt(&d.Datastore, h.Datastores[0])
				if findDatastore(sc, d.Datastore) == nil {
					return nil, fmt.Errorf("VM %s: datastore %q is not in \"datastores\"", vm.Name, d.Datastore)
				}
				dflt(&d.SizeGB, 100)
				dflt(&d.Backing, "eager_zeroed")
			}
		}
	}
	return sc, nil
}

// dflt sets *v to d when the scenario left it unset (zero).
func dflt[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

func findDatastore(sc *Scenario, name string) *DatastoreSpec {
	for i := range sc.Datastores {
		if sc.Datastores[i].Name == name {
			return &sc.Datastores[i]
		}
	}
	return nil
}

// hostLUNs is every LUN a host sees: those behind its datastores, its RDMs, its "luns"
// entries and the naa.* instances named in its perf.
func hostLUNs(sc *Scenario, h *HostSpec) []LUNSpec {
	byName := map[string]LUNSpec{}
	add := func(name string) {
		if _, ok := byName[name]; !ok && name != "" {
			byName[name] = LUNSpec{Name: name}
		}
	}
	for _, d := range h.Datastores {
		for _, l := range findDatastore(sc, d).LUNs {
			add(l)
		}
	}
	for _, vm := range h.VMs {
		for _, d := range vm.Disks {
			if d.Backing == "rdm" {
				add(d.LUN)
			}
		}
	}
	for _, raw := range h.Perf {
		var byInstance map[string]json.RawMessage
		if json.Unmarshal(raw, &byInstance) == nil {
			for inst := range byInstance {
				if strings.HasPrefix(inst, "naa.") || strings.HasPrefix(inst, "eui.") {
					add(inst)
				}
			}
		}
	}
	for _, l := range h.LUNs {
		byName[l.Name] = l
	}
	out := make([]LUNSpec, 0, len(byName))
	for _, l := range byName {
		if l.Plugin == "HPP" {
			dflt(&l.Policy, "LB-RR")
		} else {
			l.Plugin = "NMP"
			dflt(&l.Policy, "VMW_PSP_RR")
			dflt(&l.SATP, "VMW_SATP_ALUA")
		}
		dflt(&l.Paths, 4)
		dflt(&l.QueueDepth, 64)
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
