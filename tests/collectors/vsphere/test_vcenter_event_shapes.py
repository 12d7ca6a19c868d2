"""vCenter's event XML as vCenter writes it, where govmomi's simulator writes it otherwise.

The page below is a ReadNextEvents answer written after VMware's vSphere Web Services API reference (8.0)
for each type in it - Event (key, chainId, createdTime, userName and the datacenter, computeResource, host,
vm and ds entity arguments), VmMigratedEvent/DrsVmMigratedEvent (sourceHost, sourceDatastore),
VmRelocatedEvent, VmReconfiguredEvent (configSpec with a VirtualDeviceConfigSpec whose device is an
xsi:type'd VirtualDisk), TaskEvent (info: TaskInfo with descriptionId), ExtendedEvent (eventTypeId,
managedObject, data), EventEx (eventTypeId, severity, arguments of KeyAnyValue), DasHostFailedEvent
(failedHost), AlarmStatusChangedEvent (alarm, source, entity, from, to) - with what a real vCenter does that
the simulator does not: microsecond times, typed argument values, an EventEx from an ESXi host naming no
objectId, a reconfiguration that gives its disk size in KB only, tasks that are no snapshot, an empty userName
for vCenter's own events.
"""

from __future__ import annotations

from db2vtop.collectors.vsphere.events import SUMMARY_MAX, parse_time, to_annotation
from db2vtop.collectors.vsphere.soapxml import NS, Node
from tests.infra.vsphere_sim import soap_body

LUN = "naa.60002ac0000000000000000a00021f6b"
COMMON = ('<key>{key}</key><chainId>{key}</chainId><createdTime>2024-05-01T02:1{key}:05.123456Z</createdTime>'
          '<userName>{user}</userName><datacenter><name>DC1</name>'
          '<datacenter type="Datacenter">datacenter-3</datacenter></datacenter>'
          '<computeResource><name>prod</name><computeResource type="ClusterComputeResource">domain-c8'
          '</computeResource></computeResource>')
HOST12 = '<host><name>esx12.lab</name><host type="HostSystem">host-12</host></host>'
VM = '<vm><name>{vm}</name><vm type="VirtualMachine">vm-{n}</vm></vm>'
JDOE = "VSPHERE.LOCAL\\jdoe"


def event(type_: str, key: int, body: str, user: str = "") -> str:
    """An event of `user` (vCenter's own, DRS's, HA's, ESXi's name none: an empty userName)."""
    return f'<returnval xsi:type="{type_}">{COMMON.format(key=key, user=user)}{body}</returnval>'


PAGE = ('<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenc="http://schemas.xmlsoap.org/soap/'
        'encoding/" xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsd="http://www.w3.org/2001/'
        'XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body>'
        '<ReadNextEventsResponse xmlns="urn:vim25">' + "".join([
            event("DrsVmMigratedEvent", 1, HOST12 + VM.format(vm="etl-7", n=42)
                  + '<ds><name>ds_db</name><datastore type="Datastore">datastore-7</datastore></ds>'
                  '<fullFormattedMessage>Migrating etl-7 from esx11.lab, ds_db to esx12.lab, ds_db in DC1'
                  '</fullFormattedMessage><template>false</template><sourceHost><name>esx11.lab</name>'
                  '<host type="HostSystem">host-11</host></sourceHost><sourceDatacenter><name>DC1</name>'
                  '<datacenter type="Datacenter">datacenter-3</datacenter></sourceDatacenter><sourceDatastore>'
                  '<name>ds_db</name><datastore type="Datastore">datastore-7</datastore></sourceDatastore>'),
            event("VmRelocatedEvent", 2, HOST12 + VM.format(vm="db01", n=7)
                  + '<ds><name>ds_fast</name><datastore type="Datastore">datastore-9</datastore></ds>'
                  '<fullFormattedMessage>Completed the relocation of the virtual machine</fullFormattedMessage>'
                  '<template>false</template><sourceHost><name>esx12.lab</name><host type="HostSystem">host-12'
                  '</host></sourceHost><sourceDatastore><name>ds_db</name><datastore type="Datastore">datastore-7'
                  '</datastore></sourceDatastore>', JDOE),
            event("VmReconfiguredEvent", 3, HOST12 + VM.format(vm="db01", n=7)
                  + '<fullFormattedMessage>Reconfigured db01 on esx12.lab in DC1</fullFormattedMessage>'
                  '<template>false</template><configSpec><changeVersion>2024-05-01T02:12:01.5Z</changeVersion>'
                  '<numCPUs>16</numCPUs><memoryMB>131072</memoryMB><cpuAllocation><reservation>0</reservation>'
                  '<limit>-1</limit></cpuAllocation><deviceChange><operation>edit</operation><device '
                  'xsi:type="VirtualDisk"><key>2001</key><deviceInfo><label>Hard disk 2</label><summary>'
                  '209,715,200 KB</summary></deviceInfo><controllerKey>1000</controllerKey><unitNumber>1'
                  '</unitNumber><capacityInKB>209715200</capacityInKB></device></deviceChange></configSpec>'
                  '<configChanges><modified>config.hardware.numCPU: 8 -&gt; 16; </modified></configChanges>', JDOE),
            event("TaskEvent", 4, HOST12 + VM.format(vm="db01", n=7)
                  + '<fullFormattedMessage>Task: Remove snapshot</fullFormattedMessage><info><key>task-991</key>'
                  '<task type="Task">task-991</task><name>RemoveSnapshot_Task</name><descriptionId>'
                  'vm.Snapshot.remove</descriptionId><entity type="VirtualMachine">vm-7</entity><entityName>db01'
                  '</entityName><state>running</state><cancelled>false</cancelled><cancelable>false</cancelable>'
                  '<reason xsi:type="TaskReasonUser"><userName>VSPHERE.LOCAL\\backup</userName></reason>'
                  '<queueTime>2024-05-01T02:14:05.1Z</queueTime><eventChainId>4</eventChainId></info>',
                  "VSPHERE.LOCAL\\backup"),
            event("TaskEvent", 5, HOST12 + VM.format(vm="db01", n=7)
                  + '<fullFormattedMessage>Task: Acquire CIM service</fullFormattedMessage><info><key>task-992'
                  '</key><task type="Task">task-992</task><descriptionId>HostSystem.acquireCimServicesTicket'
                  '</descriptionId><state>running</state><cancelled>false</cancelled><cancelable>false'
                  '</cancelable><queueTime>2024-05-01T02:15:05.1Z</queueTime><eventChainId>5</eventChainId>'
                  '</info>'),
            event("EventEx", 6, HOST12 + '<fullFormattedMessage>Device ' + LUN + ' performance has deteriorated. '
                  'I/O latency increased from average value of 1343 microseconds to 28022 microseconds.'
                  '</fullFormattedMessage><eventTypeId>esx.problem.scsi.device.io.latency.high</eventTypeId>'
                  '<severity>warning</severity><arguments><key>1</key><value xsi:type="xsd:string">' + LUN
                  + '</value></arguments><arguments><key>2</key><value xsi:type="xsd:long">1343</value>'
                  '</arguments><arguments><key>3</key><value xsi:type="xsd:long">28022</value></arguments>'),
            event("ExtendedEvent", 7, HOST12 + VM.format(vm="db01", n=7)
                  + '<fullFormattedMessage>vSphere HA restarted virtual machine db01 on host esx12.lab in '
                  'cluster prod</fullFormattedMessage><eventTypeId>com.vmware.vc.ha.VmRestartedByHAEvent'
                  '</eventTypeId><managedObject type="VirtualMachine">vm-7</managedObject><data><key>vm</key>'
                  '<value>db01</value></data>'),
            event("DasHostFailedEvent", 8, '<fullFormattedMessage>A possible host failure has been detected by '
                  'HA on esx11.lab in cluster prod in DC1</fullFormattedMessage><failedHost><name>esx11.lab'
                  '</name><host type="HostSystem">host-11</host></failedHost>'),
            event("AlarmStatusChangedEvent", 9, HOST12 + '<fullFormattedMessage>Alarm Host CPU usage on esx12.lab'
                  ' changed from Green to Red</fullFormattedMessage><alarm><name>Host CPU usage</name><alarm '
                  'type="Alarm">alarm-1</alarm></alarm><source><name>Datacenters</name><entity type="Folder">'
                  'group-d1</entity></source><entity><name>esx12.lab</name><entity type="HostSystem">host-12'
                  '</entity></entity><from>green</from><to>red</to>'),
            event("VmPoweredOnEvent", 9, HOST12 + VM.format(vm="db01", n=7)
                  + '<fullFormattedMessage>db01 on esx12.lab in DC1 is powered on</fullFormattedMessage>'
                  '<template>false</template>'),
            event("EventEx", 9, VM.format(vm="db01", n=7) + '<fullFormattedMessage>Storage DRS migrated disks of '
                  + "db01 " * 400 + '</fullFormattedMessage><eventTypeId>com.vmware.vc.sdrs.'
                  'StorageDrsStorageMigrationEvent</eventTypeId><severity>info</severity>'),
        ]) + '</ReadNextEventsResponse></soapenv:Body></soapenv:Envelope>')


def test_real_vcenter_event_shapes_make_the_annotations_they_say():
    answer = soap_body(PAGE.encode())
    made = [to_annotation(Node(el), "vc1", {"host-12": {LUN: "ds_db"}}, {}) for el in answer.findall(NS + "returnval")]
    said = [(a.name, a.tags.get("category"), a.text, {k: v for k, v in a.tags.items() if k not in ("vcenter",
                                                                                                    "category")})
            for a in made if a is not None]
    assert said[:8] == [
        ("DrsVmMigratedEvent", "migration", "DRS moved etl-7 from esx11.lab onto esx12.lab",
         {"vm": "etl-7", "host": "esx12.lab", "datastore": "ds_db", "source_host": "esx11.lab"}),
        ("VmRelocatedEvent", "migration",
         "Storage vMotion moved db01 from datastore ds_db to ds_fast (by VSPHERE.LOCAL\\jdoe)",
         {"vm": "db01", "host": "esx12.lab", "datastore": "ds_fast", "source_host": "esx12.lab"}),
        ("VmReconfiguredEvent", "reconfigure",
         "db01 reconfigured: 16 vCPUs, memory 131072 MB, CPU reservation 0 MHz, CPU limit none, "
         "Hard disk 2 resized to 200 GB (by VSPHERE.LOCAL\\jdoe)", {"vm": "db01", "host": "esx12.lab"}),
        ("TaskEvent", "snapshot", "removing a snapshot of db01 started (by VSPHERE.LOCAL\\backup)",
         {"vm": "db01", "host": "esx12.lab"}),
        # the acquireCimServicesTicket task is no snapshot: left out
        ("esx.problem.scsi.device.io.latency.high", "storage",
         f"esx12.lab: device {LUN} I/O latency rose from 1.3 ms to 28.0 ms",
         {"host": "esx12.lab", "datastore": "ds_db", "lun": LUN}),
        ("com.vmware.vc.ha.VmRestartedByHAEvent", "ha", "HA restarted db01 on esx12.lab",
         {"vm": "db01", "host": "esx12.lab"}),
        ("DasHostFailedEvent", "ha", "HA: host esx11.lab failed", {"host": "esx11.lab"}),
        ("AlarmStatusChangedEvent", "alarm", "alarm 'Host CPU usage' on esx12.lab: green → red",
         {"host": "esx12.lab"}),
    ]
    assert made[0].ts == parse_time("2024-05-01T02:11:05.123456Z") == 1714529465_123456000
    assert said[8][2] == "db01 powered on on esx12.lab" and len(made) == 11 and made[4] is None
    # vCenter's own message, where no summary of ours says it, is held to SUMMARY_MAX
    sdrs = made[-1]
    assert sdrs.text.startswith("Storage DRS migrated disks of db01 db01") and len(sdrs.text) == SUMMARY_MAX


def test_times_in_any_precision_and_zone():
    assert parse_time("2024-05-01T02:11:05Z") == 1714529465 * 10**9
    assert parse_time("2024-05-01T04:11:05.5+02:00") == 1714529465_500000000
    assert parse_time("2024-05-01T02:11:05.123456789Z") == 1714529465_123456789
