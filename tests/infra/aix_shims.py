"""AIX command stand-ins for the remote PATH of the test sshd (no AIX host exists here).

Each prints what the IBM documentation shows for that command; the page is named in the
shim. The host is an AIX 6.1 LPAR running DB2 on FC LUNs, as in seeds S3/S4: hdisk1 is a
data LUN whose queue_depth (3) is too small, so its service queue fills (sqfull).
Every shim appends its arguments to `aix-calls.log` in the shim directory.
"""

from __future__ import annotations

from pathlib import Path

LOG = 'printf "%s %s\\n" "$(basename "$0")" "$*" >> "$(dirname "$0")/aix-calls.log"\n'

SHIMS = {
    "uname": """# uname -s on AIX prints "AIX" (IBM AIX 7.3 docs, "uname Command")
echo AIX
""",
    "hostname": """echo db2aix01
""",
    "oslevel": """# IBM AIX docs, "oslevel Command": -s prints Version-TL-SP-build
echo 6100-09-12-1846
""",
    # IBM AIX 7.3 docs, "vmstat Command" (https://www.ibm.com/docs/en/aix/7.3?topic=v-vmstat-command):
    # System configuration line, kthr/memory/page/faults/cpu groups; pc and ec on shared LPARs.
    # The first data line averages since boot, the second covers the interval.
    "vmstat": """cat <<'EOF'

System configuration: lcpu=8 mem=16384MB ent=2.00

kthr    memory              page              faults              cpu
----- ----------- ------------------------ ------------ -----------------------
 r  b   avm   fre  re  pi  po  fr   sr  cy  in   sy  cs us sy id wa    pc    ec
 1  0 1802416 1930107   0   0   0   0    0   0  12  368 239  3  1 95  1  0.09   4.5
 4  2 1803012 1929511   0  12   3  40  120   0 2214 18312 4521 41 12 30 17  1.43  71.5
EOF
""",
    # IBM AIX 7.3 docs, "iostat Command" (https://www.ibm.com/docs/en/aix/7.3?topic=i-iostat-command),
    # -D extended drive report: xfer/read/write/queue stanzas; bps, bread, bwrtn take K/M/G/T suffixes.
    "iostat": """cat <<'EOF'

System configuration: lcpu=8 drives=2 paths=4 vdisks=0

hdisk0          xfer:  %tm_act      bps      tps      bread      bwrtn
                         0.2      2.1K     0.3        1.0K       1.1K
                read:      rps  avgserv  minserv  maxserv   timeouts      fails
                          0.1      0.8      0.1     12.4           0          0
               write:      wps  avgserv  minserv  maxserv   timeouts      fails
                          0.2      1.2      0.3     20.1           0          0
               queue:  avgtime  mintime  maxtime  avgwqsz    avgsqsz     sqfull
                          0.0      0.0      1.3      0.0        0.0         0.0
hdisk1          xfer:  %tm_act      bps      tps      bread      bwrtn
                        35.1      8.2M   950.0        6.1M       2.1M
                read:      rps  avgserv  minserv  maxserv   timeouts      fails
                        700.0      3.9      0.2     41.0           0          0
               write:      wps  avgserv  minserv  maxserv   timeouts      fails
                        250.0      1.0      0.3     15.2           0          0
               queue:  avgtime  mintime  maxtime  avgwqsz    avgsqsz     sqfull
                          2.2      0.0     80.1      1.1        1.8        12.0
--------------------------------------------------------------------------------

hdisk0          xfer:  %tm_act      bps      tps      bread      bwrtn
                         1.0     16.4K     4.0       16.4K       0.0
                read:      rps  avgserv  minserv  maxserv   timeouts      fails
                          4.0      4.9      0.3      9.9           0          0
               write:      wps  avgserv  minserv  maxserv   timeouts      fails
                          0.0      0.0      0.0      0.0           0          0
               queue:  avgtime  mintime  maxtime  avgwqsz    avgsqsz     sqfull
                          0.0      0.0      0.0      0.0        0.0         0.0
hdisk1          xfer:  %tm_act      bps      tps      bread      bwrtn
                        98.0     61.4M  7500.0       49.2M      12.2M
                read:      rps  avgserv  minserv  maxserv   timeouts      fails
                       6000.0      4.1      0.2     95.3           0          0
               write:      wps  avgserv  minserv  maxserv   timeouts      fails
                       1500.0      1.1      0.3     22.0           0          0
               queue:  avgtime  mintime  maxtime  avgwqsz    avgsqsz     sqfull
                         12.5      0.0    1.2S      30.2        3.0       850.0
--------------------------------------------------------------------------------
EOF
""",
    # IBM AIX docs, "lsdev Command": -Cc class lists name, status, location, description; -F picks columns.
    "lsdev": """case "$*" in
"-Cc disk -F name") printf 'hdisk0\\nhdisk1\\n' ;;
"-Cc adapter -F name") printf 'ent0\\nfcs0\\nfcs1\\nvscsi0\\n' ;;
"-Cc disk -F name:description") printf 'hdisk0:Virtual SCSI Disk Drive\\nhdisk1:MPIO Other FC SCSI Disk Drive\\n' ;;
*) echo "lsdev: 0514-521 Cannot find information in the predefined device configuration database" >&2; exit 1 ;;
esac
""",
    # IBM AIX docs, "lsattr Command": -E effective values, -l device, -F attribute:value output format;
    # hdisk/fcs attribute names as in "Fibre Channel adapter and disk tuning" (queue_depth, max_transfer,
    # num_cmd_elems, max_xfer_size). aio0 no longer exists on AIX 6.1 (AIO tunables moved to ioo).
    "lsattr": """case "$*" in
"-El hdisk0 -F attribute:value") cat <<'EOF'
PCM:PCM/friend/vscsi
algorithm:fail_over
max_transfer:0x40000
queue_depth:3
reserve_policy:no_reserve
EOF
;;
"-El hdisk1 -F attribute:value") cat <<'EOF'
PCM:PCM/friend/fcpother
algorithm:round_robin
hcheck_interval:60
max_transfer:0x80000
pvid:00f6a4c5d1e0a1b20000000000000000
queue_depth:3
reserve_policy:no_reserve
unique_id:3E213600A098038303053453F463045727A4D0F1818      FAStT03IBMfcp
EOF
;;
"-El fcs0 -F attribute:value"|"-El fcs1 -F attribute:value") cat <<'EOF'
init_link:auto
max_xfer_size:0x100000
num_cmd_elems:200
sw_fc_class:2
EOF
;;
*) echo "lsattr: 0514-519 The following device was not found in the customized device" \
        "configuration database: ${2:-?}" >&2; exit 255 ;;
esac
""",
    # IBM AIX 6.1 docs, "vmo Command": -a lists "name = value"; -F adds the restricted tunables.
    "vmo": """cat <<'EOF'
        ame_cpus_per_pool = n/a
                  maxfree = 1088
                  maxperm = 3808032
                  minfree = 960
                  minperm = 126931
##Restricted tunables
          lru_file_repage = 0
           lru_poll_interval = 10
EOF
""",
    # IBM AIX 6.1 docs, "ioo Command" and "Asynchronous I/O tunable parameters": aio_* tunables.
    "ioo": """cat <<'EOF'
                    aio_active = 1
                   aio_maxreqs = 65536
                aio_maxservers = 30
                aio_minservers = 3
         aio_server_inactivity = 300
               j2_maxPageReadAhead = 128
EOF
""",
}


def fixture(name: str) -> str:
    """The documented output a shim prints (its here-document)."""
    body = SHIMS[name]
    return body[body.index("<<'EOF'\n") + 8:body.index("\nEOF")] + "\n"


def install(shims: Path) -> list[Path]:
    paths = []
    for name, body in SHIMS.items():
        path = shims / name
        path.write_text("#!/bin/sh\n" + LOG + body)
        path.chmod(0o755)
        paths.append(path)
    return paths
