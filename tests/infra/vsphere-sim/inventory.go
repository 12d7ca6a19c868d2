package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/simulator/esx"
	"github.com/vmware/govmomi/simulator/vpx"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/types"
)

const gib = int64(1) << 30

// builder creates the scenario's objects through the in-process API (so the simulator's
// own bookkeeping stays right), then sets what the API cannot (hardware, quickStats,
// guest state, multipathing) directly on the objects before the server starts.
type builder struct {
	ctx     context.Context
	sc      *Scenario
	esx     bool
	model   *simulator.Model
	reg     *simulator.Registry
	c       *vim25.Client
	perf    *PerfMgr
	tmp     string
	dsRef   map[string]types.ManagedObjectReference
	dsUUID  map[string]string
	lunUUID map[string]map[string]string // host -> LUN canonical name -> its SCSI UUID on that host
	folders *object.DatacenterFolders
}

func (b *builder) build() error {
	b.reg = b.model.Map()
	c, err := vim25.NewClient(b.ctx, b.model.Service)
	if err != nil {
		return err
	}
	b.c = c
	b.dsRef = map[string]types.ManagedObjectReference{}
	b.dsUUID = map[string]string{}
	b.lunUUID = map[string]map[string]string{}
	for i, d := range b.sc.Datastores {
		b.dsUUID[d.Name] = fmt.Sprintf("%08x-%08x-%04x-%012x", 0x5f000000+i, 0x1a2b0000+i, 0xbeef, 0x005056000000+int64(i))
	}
	pm := b.reg.Get(*b.model.ServiceContent.PerfManager).(*simulator.PerformanceManager)
	b.perf = newPerfMgr(pm, b.sc.MaxQueryMetrics)

	var dc *object.Datacenter
	if b.esx {
		if len(b.sc.Hosts) != 1 {
			return fmt.Errorf("--esx serves exactly one host; the scenario has %d", len(b.sc.Hosts))
		}
		ref := b.reg.Any("Datacenter").Reference()
		dc = object.NewDatacenter(c, ref)
	} else {
		dc, err = object.NewRootFolder(c).CreateDatacenter(b.ctx, b.sc.Datacenter)
		if err != nil {
			return err
		}
	}
	if b.folders, err = dc.Folders(b.ctx); err != nil {
		return err
	}
	clusters := map[string]*object.ClusterComputeResource{}
	var jobs []vmJob
	for i := range b.sc.Hosts {
		h := &b.sc.Hosts[i]
		host, err := b.addHost(h, clusters)
		if err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		if err := b.mountDatastores(h, host); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		if err := b.configureHost(h, host); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		for j := range h.VMs {
			jobs = append(jobs, vmJob{h, &h.VMs[j], host})
		}
	}
	if err := b.addVMs(jobs); err != nil {
		return err
	}
	b.finishDatastores()
	if b.sc.MaxQueryMetrics > 0 {
		om := b.reg.OptionManager()
		om.Setting = append(om.Setting, &types.OptionValue{Key: "config.vpxd.stats.maxQueryMetrics",
			Value: fmt.Sprint(b.sc.MaxQueryMetrics)})
	}
	b.reg.Put(b.perf)
	if b.sc.Version != "" {
		// a newer server than govmomi's 6.5 speaks the API of its release (types such as the HPP's policy are 7.0's)
		about := &b.reg.Get(vim25.ServiceInstance).(*simulator.ServiceInstance).Content.About
		about.FullName = strings.Replace(about.FullName, about.Version, b.sc.Version, 1)
		about.Version, about.ApiVersion = b.sc.Version, b.sc.Version+".0"
	}
	return nil
}

// wait waits for an in-process task by polling the simulator's own task object, which
// is much quicker than a PropertyCollector waiter when thousands of VMs are created.
func (b *builder) wait(task *object.Task, err error) (types.AnyType, error) {
	if err != nil {
		return nil, err
	}
	t := b.reg.Get(task.Reference()).(*simulator.Task)
	t.Wait()
	if t.Info.Error != nil {
		return nil, fmt.Errorf("%s: %s", t.Info.Name, t.Info.Error.LocalizedMessage)
	}
	return t.Info.Result, nil
}

func (b *builder) addHost(h *HostSpec, clusters map[string]*object.ClusterComputeResource) (*simulator.HostSystem, error) {
	if b.esx {
		host := b.reg.Any("HostSystem").(*simulator.HostSystem)
		host.Name = h.Name
		return host, nil
	}
	spec := types.HostConnectSpec{HostName: h.Name}
	var result types.AnyType
	var err error
	if h.Cluster != "" {
		cl := clusters[h.Cluster]
		if cl == nil {
			if cl, err = b.folders.HostFolder.CreateCluster(b.ctx, h.Cluster, types.ClusterConfigSpecEx{}); err != nil {
				return nil, err
			}
			clusters[h.Cluster] = cl
		}
		result, err = b.wait(cl.AddHost(b.ctx, spec, true, nil, nil))
	} else {
		result, err = b.wait(b.folders.HostFolder.AddStandaloneHost(b.ctx, spec, true, nil, nil))
	}
	if err != nil {
		return nil, err
	}
	ref := result.(types.ManagedObjectReference)
	return b.reg.Get(ref).(*simulator.HostSystem), nil
}

func (b *builder) mountDatastores(h *HostSpec, host *simulator.HostSystem) error {
	dss := object.NewHostDatastoreSystem(b.c, *host.ConfigManager.DatastoreSystem)
	for _, name := range h.Datastores {
		dir := filepath.Join(b.tmp, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		ds, err := dss.CreateLocalDatastore(b.ctx, name, dir)
		if err != nil {
			return fmt.Errorf("datastore %s: %w", name, err)
		}
		if _, ok := b.dsRef[name]; !ok { // later mounts of the same datastore return no reference
			b.dsRef[name] = ds.Reference()
		}
	}
	return nil
}

func (b *builder) configureHost(h *HostSpec, host *simulator.HostSystem) error {
	threadsPerCore := int16(1)
	if *h.Hyperthreading {
		threadsPerCore = 2
	}
	if h.CPUThreads != h.CPUCores*threadsPerCore {
		threadsPerCore = h.CPUThreads / max(h.CPUCores, 1)
	}
	hw := *host.Hardware
	hw.CpuInfo = types.HostCpuInfo{NumCpuPackages: h.CPUSockets, NumCpuCores: h.CPUCores, NumCpuThreads: h.CPUThreads,
		Hz: int64(h.CPUMhz) * 1_000_000}
	hw.CpuPkg = nil
	for s := int16(0); s < h.CPUSockets; s++ {
		hw.CpuPkg = append(hw.CpuPkg, types.HostCpuPackage{Index: s, Vendor: "intel", Hz: hw.CpuInfo.Hz,
			Description: h.CPUModel})
	}
	mem := h.MemoryMB << 20
	hw.MemorySize = mem
	numa := &types.HostNumaInfo{Type: "NUMA", NumNodes: int32(h.NUMANodes)}
	perNode := int(h.CPUThreads) / h.NUMANodes
	for n := 0; n < h.NUMANodes; n++ {
		node := types.HostNumaNode{TypeId: byte(n), MemoryRangeBegin: int64(n) * (mem / int64(h.NUMANodes)),
			MemoryRangeLength: mem / int64(h.NUMANodes), MemorySize: mem / int64(h.NUMANodes)}
		for c := n * perNode; c < (n+1)*perNode; c++ {
			node.CpuID = append(node.CpuID, int16(c))
		}
		numa.NumaNode = append(numa.NumaNode, node)
	}
	hw.NumaInfo = numa
	host.Hardware = &hw

	sumHw := *host.Summary.Hardware
	sumHw.CpuModel, sumHw.CpuMhz, sumHw.MemorySize = h.CPUModel, h.CPUMhz, mem
	sumHw.NumCpuPkgs, sumHw.NumCpuCores, sumHw.NumCpuThreads = h.CPUSockets, h.CPUCores, h.CPUThreads
	host.Summary.Hardware = &sumHw
	host.Summary.Config.Name = h.Name
	product := types.AboutInfo{Name: "VMware ESXi", Version: h.Version, Build: h.Build, ApiType: "HostAgent",
		FullName: fmt.Sprintf("VMware ESXi %s build-%s", h.Version, h.Build), ProductLineId: "embeddedEsx"}
	host.Summary.Config.Product = &product
	host.Summary.QuickStats = types.HostListSummaryQuickStats{
		OverallCpuUsage:    int32(int64(h.CPUMhz) * int64(h.CPUCores) / 5),
		OverallMemoryUsage: int32(h.MemoryMB / 2),
		Uptime:             864000,
	}
	if err := setInts(&host.Summary.QuickStats, h.QuickStats); err != nil {
		return err
	}

	cfg := *host.Config
	cfg.Product = product
	cfg.HyperThread = &types.HostHyperThreadScheduleInfo{Available: *h.Hyperthreading, Active: *h.Hyperthreading,
		Config: *h.Hyperthreading}
	cfg.PowerSystemInfo = &types.PowerSystemInfo{CurrentPolicy: types.HostPowerPolicy{Key: 1,
		Name: powerPolicyName(h.PowerPolicy), ShortName: h.PowerPolicy}}
	luns := hostLUNs(b.sc, h)
	storage := &types.HostStorageDeviceInfo{MultipathInfo: &types.HostMultipathInfo{}}
	b.lunUUID[h.Name] = map[string]string{}
	for i, l := range luns {
		// shaped as real hosts report a device (govmomi's captured ESX data, ESXi 6.7 and 8.0.3 answers): scsiLun
		// keyed and multipathInfo's logical unit identified by the SCSI UUID, the canonical name on scsiLun only
		vendor, model, transport := "NETAPP", "LUN C-Mode", "Fibre Channel"
		if l.Plugin == "HPP" {
			vendor, model, transport = "NVMe", "NetApp ONTAP Con", "NVMe TCP"
		}
		uuid := scsiUUID(l.Name, i, model)
		b.lunUUID[h.Name][l.Name] = uuid
		key := "key-vim.host.ScsiDisk-" + uuid
		storage.ScsiLun = append(storage.ScsiLun, &types.HostScsiDisk{ScsiLun: types.ScsiLun{
			HostDevice: types.HostDevice{DeviceName: "/vmfs/devices/disks/" + l.Name, DeviceType: "disk"},
			Key:        key, Uuid: uuid, CanonicalName: l.Name,
			Descriptor: []types.ScsiLunDescriptor{{Quality: "highQuality", Id: l.Name},
				{Quality: "lowQuality", Id: "vml." + uuid}, {Quality: "lowQuality", Id: uuid}},
			DisplayName: fmt.Sprintf("%s %s Disk (%s)", vendor, transport, l.Name),
			LunType:     "disk", Vendor: vendor, Model: model, QueueDepth: l.QueueDepth,
			OperationalState: []string{"ok"}}, LocalDisk: types.NewBool(false)})
		mp := types.HostMultipathInfoLogicalUnit{Key: "key-vim.host.MultipathInfo.LogicalUnit-" + uuid, Id: uuid, Lun: key}
		if l.Plugin == "HPP" {
			mp.Policy = &types.HostMultipathInfoHppLogicalUnitPolicy{
				HostMultipathInfoLogicalUnitPolicy: types.HostMultipathInfoLogicalUnitPolicy{Policy: l.Policy}, Path: "none"}
		} else {
			mp.Policy = &types.HostMultipathInfoLogicalUnitPolicy{Policy: l.Policy}
			mp.StorageArrayTypePolicy = &types.HostMultipathInfoLogicalUnitStorageArrayTypePolicy{Policy: l.SATP}
		}
		for p := 0; p < l.Paths; p++ {
			state := "active"
			if p < l.DeadPaths {
				state = "dead"
			}
			name := fmt.Sprintf("vmhba%d:C0:T%d:L%d", 1+p%2, p/2, i)
			mp.Path = append(mp.Path, types.HostMultipathInfoPath{Key: "key-vim.host.MultipathInfo.Path-" + name, Name: name,
				PathState: state, State: state, Adapter: fmt.Sprintf("key-vim.host.FibreChannelHba-vmhba%d", 1+p%2), Lun: mp.Key})
		}
		storage.MultipathInfo.Lun = append(storage.MultipathInfo.Lun, mp)
	}
	cfg.StorageDevice = storage
	cfg.Network = &types.HostNetworkInfo{
		Vswitch: []types.HostVirtualSwitch{{Name: "vSwitch0", Key: "key-vim.host.VirtualSwitch-vSwitch0", Mtu: h.MTU,
			NumPorts: 128, Pnic: []string{"key-vim.host.PhysicalNic-vmnic0", "key-vim.host.PhysicalNic-vmnic1"}}},
		Vnic: []types.HostVirtualNic{{Device: "vmk0", Key: "key-vim.host.VirtualNic-vmk0", Portgroup: "Management Network",
			Spec: types.HostVirtualNicSpec{Mtu: h.VmknicMTU}}},
		Pnic: []types.PhysicalNic{{Device: "vmnic0", Key: "key-vim.host.PhysicalNic-vmnic0"},
			{Device: "vmnic1", Key: "key-vim.host.PhysicalNic-vmnic1"}},
	}
	host.Config = &cfg

	var dsInst, lunInst []string
	for _, d := range h.Datastores {
		dsInst = append(dsInst, b.dsUUID[d])
	}
	for _, l := range luns {
		lunInst = append(lunInst, l.Name)
	}
	metrics := vpx.HostMetrics
	if b.esx {
		metrics = esx.HostMetrics
	}
	inst := b.instances(metrics, wantedHost, func(group string, perCPU bool, name string) []string {
		switch group {
		case "cpu":
			if perCPU {
				return append([]string{""}, seq(int(h.CPUThreads))...)
			}
		case "disk":
			if name == "disk.read.average" || name == "disk.write.average" {
				return append([]string{""}, lunInst...)
			}
			if !strings.Contains(name, "maxTotalLatency") && name != "disk.usage.average" {
				return lunInst
			}
		case "datastore":
			if !strings.Contains(name, "maxTotalLatency") {
				return dsInst
			}
		case "net":
			return []string{"", "vmnic0", "vmnic1"}
		}
		return []string{""}
	})
	perf, err := parsePerf("host "+h.Name, h.Perf)
	if err != nil {
		return err
	}
	return b.perf.define(host.Reference(), inst, hostDefaults, perf)
}

func powerPolicyName(short string) string {
	switch short {
	case "static":
		return "High performance"
	case "dynamic":
		return "Balanced"
	case "low":
		return "Low power"
	}
	return "Custom"
}

// instances decides which instances each counter has for one entity: every counter of
// the stock list for that entity type plus the ones db2vtop reads.
func (b *builder) instances(stock []types.PerfMetricId, wanted []string, rule func(group string, perCPU bool, name string) []string) map[string][]string {
	perCPU := map[string]bool{}
	names := map[string]bool{}
	for _, m := range stock {
		name, ok := b.perf.names[m.CounterId]
		if !ok {
			continue
		}
		names[name] = true
		if m.Instance == "$cpu" {
			perCPU[name] = true
		}
	}
	for _, name := range wanted {
		names[name] = true
	}
	out := map[string][]string{}
	for name := range names {
		out[name] = rule(strings.SplitN(name, ".", 2)[0], perCPU[name] || perVCPU[name], name)
	}
	return out
}

func seq(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}

type vmJob struct {
	h    *HostSpec
	v    *VMSpec
	host *simulator.HostSystem
}

// addVMs creates VMs on several goroutines: each task costs little CPU but a poll.
func (b *builder) addVMs(jobs []vmJob) error {
	work := make(chan vmJob)
	errs := make(chan error, len(jobs))
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				if err := b.addVM(j.h, j.v, j.host); err != nil {
					errs <- fmt.Errorf("VM %s: %w", j.v.Name, err)
				}
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

func (b *builder) addVM(h *HostSpec, v *VMSpec, host *simulator.HostSystem) error {
	pool, err := object.NewHostSystem(b.c, host.Reference()).ResourcePool(b.ctx)
	if err != nil {
		return err
	}
	cpuLimit := int64(-1)
	if v.CPULimitMhz != nil {
		cpuLimit = *v.CPULimitMhz
	}
	memLimit := int64(-1)
	if v.MemoryLimitMB != nil {
		memLimit = *v.MemoryLimitMB
	}
	shares := types.SharesLevelNormal
	if v.CPUShares != "" {
		shares = types.SharesLevel(v.CPUShares)
	}
	spec := types.VirtualMachineConfigSpec{
		Name: v.Name, GuestId: "rhel8_64Guest", Version: v.HWVersion,
		NumCPUs: v.NumCPU, NumCoresPerSocket: types.NewInt32(v.CoresPerSocket), MemoryMB: v.MemoryMB,
		CpuHotAddEnabled:             types.NewBool(v.CPUHotAdd),
		MemoryReservationLockedToMax: types.NewBool(v.ReservationLockedToMax),
		CpuAllocation: &types.ResourceAllocationInfo{Reservation: types.NewInt64(v.CPUReservationMhz),
			Limit: types.NewInt64(cpuLimit), Shares: &types.SharesInfo{Level: shares}},
		MemoryAllocation: &types.ResourceAllocationInfo{Reservation: types.NewInt64(v.MemoryReservationMB),
			Limit: types.NewInt64(memLimit), Shares: &types.SharesInfo{Level: types.SharesLevelNormal}},
		LatencySensitivity: &types.LatencySensitivity{Level: types.LatencySensitivitySensitivityLevel(v.LatencySensitivity)},
		SwapPlacement:      v.SwapPlacement,
		Files:              &types.VirtualMachineFileInfo{VmPathName: "[" + v.Disks[0].Datastore + "]"},
	}
	var devices object.VirtualDeviceList
	scsi, err := devices.CreateSCSIController(scsiKind(v.SCSI))
	if err != nil {
		return err
	}
	devices = append(devices, scsi)
	for i, d := range v.Disks {
		if d.Datastore != v.Disks[0].Datastore { // the simulator makes the VM's folder on its first datastore only
			if err := os.MkdirAll(filepath.Join(b.tmp, d.Datastore, v.Name), 0o755); err != nil {
				return err
			}
		}
		disk := devices.CreateDisk(scsi.(types.BaseVirtualController), b.dsRef[d.Datastore],
			fmt.Sprintf("[%s] %s/%s_%d.vmdk", d.Datastore, v.Name, v.Name, i))
		disk.CapacityInKB = d.SizeGB * gib / 1024
		devices = append(devices, disk)
	}
	backing := &types.VirtualEthernetCardNetworkBackingInfo{
		VirtualDeviceDeviceBackingInfo: types.VirtualDeviceDeviceBackingInfo{DeviceName: "VM Network"}}
	nic, err := devices.CreateEthernetCard(v.NIC, backing)
	if err != nil {
		return err
	}
	devices = append(devices, nic)
	if spec.DeviceChange, err = devices.ConfigSpec(types.VirtualDeviceConfigSpecOperationAdd); err != nil {
		return err
	}
	result, err := b.wait(b.folders.VmFolder.CreateVM(b.ctx, spec, pool, object.NewHostSystem(b.c, host.Reference())))
	if err != nil {
		return err
	}
	ref := result.(types.ManagedObjectReference)
	if v.PowerState == "poweredOn" {
		if _, err := b.wait(object.NewVirtualMachine(b.c, ref).PowerOn(b.ctx)); err != nil {
			return err
		}
	}
	vm := b.reg.Get(ref).(*simulator.VirtualMachine)
	return b.configureVM(h, v, vm)
}

func scsiKind(s string) string {
	switch s {
	case "lsilogic", "lsilogic-sas", "buslogic", "pvscsi":
		return s
	case "lsilogicsas":
		return "lsilogic-sas"
	}
	return "pvscsi"
}

// ownControllers gives the VM its own copy of the default controllers. govmomi's simulator adds the
// same package-level PCI/PS2/SIO/IDE controller objects to every VM it creates, and each VM's devices
// are appended to their device lists: at 2,000 VMs one VM's PCI controller would list ~2,000 devices
// of other VMs (a device read ~20x a real vCenter's). A real controller lists its own VM's devices.
func ownControllers(vm *simulator.VirtualMachine) {
	devs := vm.Config.Hardware.Device
	own := func(key int32) []int32 {
		var keys []int32
		for _, d := range devs {
			if d.GetVirtualDevice().ControllerKey == key {
				keys = append(keys, d.GetVirtualDevice().Key)
			}
		}
		return keys
	}
	for i, d := range devs {
		switch c := d.(type) {
		case *types.VirtualPCIController:
			devs[i] = ownCopy(c, own)
		case *types.VirtualPS2Controller:
			devs[i] = ownCopy(c, own)
		case *types.VirtualSIOController:
			devs[i] = ownCopy(c, own)
		case *types.VirtualIDEController:
			devs[i] = ownCopy(c, own)
		}
	}
}

// ownCopy is a copy of the shared controller c whose device list is its own VM's.
func ownCopy[C any, P interface {
	*C
	types.BaseVirtualDevice
	GetVirtualController() *types.VirtualController
}](c P, own func(key int32) []int32) types.BaseVirtualDevice {
	cp := P(new(C))
	*cp = *c
	vc := cp.GetVirtualController()
	vc.Device = own(vc.Key)
	return cp
}

func (b *builder) configureVM(h *HostSpec, v *VMSpec, vm *simulator.VirtualMachine) error {
	ownControllers(vm)
	var diskInst, nicInst, dsInst []string
	seenDS := map[string]bool{}
	diskIdx := 0
	busOf := map[int32]int32{}
	for _, d := range vm.Config.Hardware.Device {
		if c, ok := d.(types.BaseVirtualSCSIController); ok {
			busOf[c.GetVirtualSCSIController().Key] = c.GetVirtualSCSIController().BusNumber
		}
	}
	for _, d := range vm.Config.Hardware.Device {
		switch dev := d.(type) {
		case *types.VirtualDisk:
			spec := v.Disks[diskIdx]
			diskIdx++
			unit := int32(0)
			if dev.UnitNumber != nil {
				unit = *dev.UnitNumber
			}
			diskInst = append(diskInst, fmt.Sprintf("scsi%d:%d", busOf[dev.ControllerKey], unit))
			if flat, ok := dev.Backing.(*types.VirtualDiskFlatVer2BackingInfo); ok {
				switch spec.Backing {
				case "thin":
					flat.ThinProvisioned, flat.EagerlyScrub = types.NewBool(true), types.NewBool(false)
				case "lazy_zeroed":
					flat.ThinProvisioned, flat.EagerlyScrub = types.NewBool(false), types.NewBool(false)
				case "rdm":
					dev.Backing = &types.VirtualDiskRawDiskMappingVer1BackingInfo{
						VirtualDeviceFileBackingInfo: flat.VirtualDeviceFileBackingInfo,
						// as real hosts name an RDM's device: by its vml. name, and its LUN by the SCSI UUID
						LunUuid: b.lunUUID[h.Name][spec.LUN], DeviceName: "/vmfs/devices/disks/vml." + b.lunUUID[h.Name][spec.LUN],
						CompatibilityMode: "physicalMode", DiskMode: "independent_persistent"}
				default:
					flat.ThinProvisioned, flat.EagerlyScrub = types.NewBool(false), types.NewBool(true)
				}
			}
			if u := b.dsUUID[spec.Datastore]; !seenDS[u] {
				seenDS[u] = true
				dsInst = append(dsInst, u)
			}
		case types.BaseVirtualEthernetCard:
			nicInst = append(nicInst, fmt.Sprint(d.GetVirtualDevice().Key))
		}
	}
	// enums the stock simulator leaves empty, which strict clients (pyvmomi) refuse
	vm.Runtime.FaultToleranceState = types.VirtualMachineFaultToleranceStateNotConfigured
	vm.Runtime.RecordReplayState = types.VirtualMachineRecordReplayStateInactive
	vm.Summary.Runtime = vm.Runtime
	vm.Guest.ToolsRunningStatus = v.Tools
	vm.Guest.ToolsVersionStatus2 = v.ToolsVersionStatus
	vm.Guest.ToolsVersion = "12352"
	vm.Summary.Guest.ToolsRunningStatus = v.Tools
	vm.Summary.Guest.ToolsVersionStatus2 = v.ToolsVersionStatus
	if v.PowerState == "poweredOn" {
		vm.Guest.HostName = v.GuestHostname
		vm.Summary.Guest.HostName = v.GuestHostname
		if len(v.IPs) > 0 {
			vm.Guest.IpAddress = v.IPs[0]
			vm.Summary.Guest.IpAddress = v.IPs[0]
			vm.Guest.Net = []types.GuestNicInfo{{Network: "VM Network", IpAddress: v.IPs, Connected: true,
				DeviceConfigId: 4000}}
		}
	}
	qs := types.VirtualMachineQuickStats{}
	if v.PowerState == "poweredOn" {
		qs = types.VirtualMachineQuickStats{OverallCpuUsage: 250 * v.NumCPU, GuestMemoryUsage: int32(v.MemoryMB * 3 / 10),
			HostMemoryUsage: int32(v.MemoryMB * 9 / 10), ConsumedOverheadMemory: 40 + 10*v.NumCPU, UptimeSeconds: 86400,
			GuestHeartbeatStatus: "green"}
	}
	perf, err := parsePerf("VM "+v.Name, v.Perf)
	if err != nil {
		return err
	}
	cpuLevels(perf, int64(v.NumCPU)*int64(h.CPUMhz))
	if v.PowerState == "poweredOn" {
		quickFromPerf(&qs, perf, v.QuickStats)
	}
	if err := setInts(&qs, v.QuickStats); err != nil {
		return err
	}
	vm.Summary.QuickStats = qs

	metrics := vpx.VmMetrics
	if b.esx {
		metrics = esx.VmMetrics
	}
	n := int(v.NumCPU)
	inst := b.instances(metrics, wantedVM, func(group string, perCPU bool, name string) []string {
		switch group {
		case "cpu":
			if perCPU {
				return append([]string{""}, seq(n)...)
			}
		case "virtualDisk":
			return diskInst
		case "net":
			return append([]string{""}, nicInst...)
		case "datastore":
			if !strings.Contains(name, "maxTotalLatency") {
				return dsInst
			}
		}
		return []string{""}
	})
	defaults := map[string]int64{}
	for k, val := range vmDefaults {
		defaults[k] = val
	}
	for _, name := range []string{"cpu.ready.summation", "cpu.usagemhz.average", "cpu.used.summation", "cpu.run.summation"} {
		defaults[name+"|"] = vmDefaults[name] * int64(n)
	}
	defaults["mem.consumed.average"] = v.MemoryMB * 1024 * 9 / 10
	defaults["mem.active.average"] = v.MemoryMB * 1024 * 3 / 10
	defaults["mem.granted.average"] = v.MemoryMB * 1024
	for counter, prop := range quickCounters { // quickStats the scenario sets are the counters' level too
		if mb, ok := v.QuickStats[prop]; ok && perf[counter] == nil {
			defaults[counter] = mb * 1024
		}
	}
	if v.PowerState != "poweredOn" {
		return nil // powered-off VMs have no realtime stats
	}
	return b.perf.define(vm.Reference(), inst, defaults, perf)
}

// quickCounters: the VM counters (KB) whose level quickStats (MB) also report, and which the two keep alike.
var quickCounters = map[string]string{"mem.consumed.average": "hostMemoryUsage", "mem.active.average": "guestMemoryUsage"}

// cpuLevels keeps a VM's CPU usage counters alike, as vCenter's are: cpu.usage.average (hundredths of a
// percent of the VM's vCPUs at the host's clock) from cpu.usagemhz.average, or the other way round, where
// the scenario sets only one of them.
func cpuLevels(perf map[string]PerfSpec, capacityMhz int64) {
	pct, mhz := perf["cpu.usage.average"], perf["cpu.usagemhz.average"]
	if capacityMhz <= 0 || (pct == nil) == (mhz == nil) {
		return
	}
	if pct == nil {
		perf["cpu.usage.average"] = scaled(mhz, 10000, capacityMhz)
	} else {
		perf["cpu.usagemhz.average"] = scaled(pct, capacityMhz, 10000)
	}
}

func scaled(spec PerfSpec, mul, div int64) PerfSpec {
	out := PerfSpec{}
	for inst, s := range spec {
		if inst != "" {
			continue
		}
		t := make(Series, len(s))
		for i, v := range s {
			t[i] = v * mul / div
		}
		out[inst] = t
	}
	return out
}

// quickFromPerf: the quickStats a scenario leaves unset that a counter it sets reports too take the
// counter's newest level (consumed and active memory in MB, CPU usage in MHz), as vCenter's two agree.
func quickFromPerf(qs *types.VirtualMachineQuickStats, perf map[string]PerfSpec, set map[string]int64) {
	newest := func(counter string) (int64, bool) {
		s := perf[counter][""]
		if len(s) == 0 {
			return 0, false
		}
		return s[len(s)-1], true
	}
	for counter, prop := range quickCounters {
		if _, given := set[prop]; !given {
			if kb, ok := newest(counter); ok {
				v := int32(kb / 1024)
				if prop == "hostMemoryUsage" {
					qs.HostMemoryUsage = v
				} else {
					qs.GuestMemoryUsage = v
				}
			}
		}
	}
	if _, given := set["overallCpuUsage"]; !given {
		if mhz, ok := newest("cpu.usagemhz.average"); ok {
			qs.OverallCpuUsage = int32(mhz)
		}
	}
}

// setInts sets integer fields of a quickStats struct from {"balloonedMemory": 2048}.
func setInts(target any, values map[string]int64) error {
	v := reflect.ValueOf(target).Elem()
	for k, val := range values {
		f := v.FieldByName(strings.ToUpper(k[:1]) + k[1:])
		if !f.IsValid() || !f.CanInt() {
			return fmt.Errorf("quickstats %q is not an integer field of %s", k, v.Type().Name())
		}
		f.SetInt(val)
	}
	return nil
}

func (b *builder) finishDatastores() {
	for _, d := range b.sc.Datastores {
		ref, ok := b.dsRef[d.Name]
		if !ok {
			continue
		}
		ds := b.reg.Get(ref).(*simulator.Datastore)
		base := *ds.Info.GetDatastoreInfo()
		base.FreeSpace = d.FreeGB * gib
		base.MaxFileSize = 62 * 1024 * gib
		ds.Summary.Capacity = d.CapacityGB * gib
		ds.Summary.FreeSpace = d.FreeGB * gib
		ds.Summary.Type = d.Type
		switch d.Type {
		case "NFS", "NFS41":
			ds.Info = &types.NasDatastoreInfo{DatastoreInfo: base, Nas: &types.HostNasVolume{
				HostFileSystemVolume: types.HostFileSystemVolume{Type: d.Type, Name: d.Name, Capacity: d.CapacityGB * gib},
				RemoteHost:           "nfs.example.com", RemotePath: "/vol/" + d.Name}}
		default:
			vol := &types.HostVmfsVolume{
				HostFileSystemVolume: types.HostFileSystemVolume{Type: "VMFS", Name: d.Name, Capacity: d.CapacityGB * gib},
				BlockSizeMb:          1, MajorVersion: 6, Version: "6.82", Uuid: b.dsUUID[d.Name]}
			for _, l := range d.LUNs {
				vol.Extent = append(vol.Extent, types.HostScsiDiskPartition{DiskName: l, Partition: 1})
			}
			ds.Info = &types.VmfsDatastoreInfo{DatastoreInfo: base, Vmfs: vol}
		}
	}
}

// The counters db2vtop reads; every VM and host has them even where the stock
// simulator's metric lists do not.
var wantedVM = []string{
	"cpu.usage.average", "cpu.ready.summation", "cpu.costop.summation", "cpu.maxlimited.summation",
	"cpu.swapwait.summation", "cpu.readiness.average", "mem.vmmemctl.average", "mem.vmmemctltarget.average",
	"mem.swapped.average", "mem.swapinRate.average", "mem.swapoutRate.average", "mem.compressed.average",
	"mem.consumed.average", "mem.active.average", "mem.latency.average",
	"virtualDisk.numberReadAveraged.average", "virtualDisk.numberWriteAveraged.average", "virtualDisk.read.average",
	"virtualDisk.write.average", "virtualDisk.totalReadLatency.average", "virtualDisk.totalWriteLatency.average",
	"virtualDisk.readOIO.latest", "virtualDisk.writeOIO.latest",
	"net.received.average", "net.transmitted.average", "net.droppedRx.summation", "net.droppedTx.summation",
}

var wantedHost = []string{
	"cpu.usage.average", "cpu.ready.summation", "cpu.costop.summation", "mem.state.latest", "mem.vmmemctl.average",
	"mem.swapused.average", "mem.swapinRate.average", "mem.swapoutRate.average", "mem.compressed.average",
	"disk.deviceLatency.average", "disk.kernelLatency.average", "disk.queueLatency.average", "disk.totalLatency.average",
	"disk.maxQueueDepth.average", "disk.commandsAborted.summation", "disk.busResets.summation",
	"disk.numberReadAveraged.average", "disk.numberWriteAveraged.average", "disk.read.average", "disk.write.average",
	"datastore.totalReadLatency.average", "datastore.totalWriteLatency.average",
	"datastore.numberReadAveraged.average", "datastore.numberWriteAveraged.average",
}

// perVCPU: VM cpu counters reported per vCPU as well as in aggregate.
var perVCPU = map[string]bool{
	"cpu.ready.summation": true, "cpu.costop.summation": true, "cpu.maxlimited.summation": true,
	"cpu.swapwait.summation": true, "cpu.readiness.average": true,
}

// Healthy values in vCenter's raw units (percent in hundredths, ms per 20 s sample, KB, KBps).
var vmDefaults = map[string]int64{
	"cpu.usage.average": 2500, "cpu.usagemhz.average": 650, "cpu.ready.summation": 100, "cpu.readiness.average": 50,
	"cpu.used.summation": 5000, "cpu.run.summation": 5000, "cpu.idle.summation": 15000, "cpu.wait.summation": 14000,
	"mem.usage.average":                      3000,
	"virtualDisk.numberReadAveraged.average": 200, "virtualDisk.numberWriteAveraged.average": 100,
	"virtualDisk.read.average": 6400, "virtualDisk.write.average": 3200, "virtualDisk.totalReadLatency.average": 2,
	"virtualDisk.totalWriteLatency.average": 1, "virtualDisk.readOIO.latest": 1, "virtualDisk.writeOIO.latest": 1,
	"net.received.average": 1000, "net.transmitted.average": 800, "net.usage.average": 1800,
	"datastore.totalReadLatency.average": 2, "datastore.totalWriteLatency.average": 1,
	"datastore.numberReadAveraged.average": 200, "datastore.numberWriteAveraged.average": 100,
}

var hostDefaults = map[string]int64{
	"cpu.usage.average": 3000, "cpu.usagemhz.average": 25000, "cpu.ready.summation": 500, "cpu.utilization.average": 3000,
	"cpu.coreUtilization.average": 4000, "mem.usage.average": 5000,
	"disk.deviceLatency.average": 1, "disk.totalLatency.average": 1, "disk.maxQueueDepth.average": 64,
	"disk.numberReadAveraged.average": 300, "disk.numberWriteAveraged.average": 200, "disk.read.average": 9600,
	"disk.write.average": 6400, "disk.usage.average": 16000,
	"datastore.totalReadLatency.average": 1, "datastore.totalWriteLatency.average": 1,
	"datastore.numberReadAveraged.average": 300, "datastore.numberWriteAveraged.average": 200,
	"net.received.average": 20000, "net.transmitted.average": 15000, "net.usage.average": 35000,
}

// scsiUUID is a device's SCSI UUID as ESXi forms it (the vml. name without its prefix): an NAA device's is 0200, its
// LUN number, 0000, the NAA id and the first six bytes of its model in hex (ESXi 6.7: 02000000006b8ca3…504552432048
// for naa.6b8ca3… model "PERC H730"); an NVMe namespace's 06 and its EUI-64 id (ESXi 8.0.3); any other the name's
// bytes in hex.
func scsiUUID(name string, lun int, model string) string {
	switch {
	case strings.HasPrefix(name, "naa."):
		return fmt.Sprintf("0200%02x0000%s%x", lun, strings.TrimPrefix(name, "naa."), (model + "      ")[:6])
	case strings.HasPrefix(name, "eui."):
		return "06" + strings.TrimPrefix(name, "eui.")
	}
	return fmt.Sprintf("%x", name)
}
