"""`symstat` (Solutions Enabler) per-device request statistics, as XML.

`symstat -sid SID -type requests -i N -c 1 -output XML` samples for N seconds and prints
one `<Request>` element per device with `dev_name`, `pd_name`, `r_per_second`,
`w_per_second`, `kb_r_per_second`, `kb_w_per_second`, `r_cache_hit_pct`,
`w_cache_hit_pct`, `sequential_r_pct` and `wp_tracks` (the command line and element
names Dell EMC's own ViPR SRM/Watch4net VMAX collector uses). "N/A" means no value.
Response times are not part of this report; the Unisphere transport has them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from db2vtop.agent.core.model import FieldValue
from db2vtop.collectors.storage.common import StorageFormatError, optional_number

FIELDS = {"r_per_second": ("read_iops", 1.0), "w_per_second": ("write_iops", 1.0),
          "kb_r_per_second": ("read_bytes_per_s", 1024.0), "kb_w_per_second": ("write_bytes_per_s", 1024.0),
          "r_cache_hit_pct": ("read_hit_pct", 1.0), "w_cache_hit_pct": ("write_hit_pct", 1.0),
          "sequential_r_pct": ("sequential_read_pct", 1.0), "wp_tracks": ("write_pending_tracks", 1.0)}
REQUIRED = ("r_per_second", "w_per_second", "kb_r_per_second", "kb_w_per_second")


def argv(sid: str, seconds: int) -> list[str]:
    return ["symstat", "-sid", sid, "-type", "requests", "-i", str(seconds), "-c", "1", "-output", "XML"]


def parse(text: str) -> dict[str, tuple[dict[str, str], dict[str, FieldValue]]]:
    """device -> (tags, fields); the last report wins if there are several."""
    try:  # a DOCTYPE (entity expansion) is refused: SYMCLI never prints one
        root = fromstring(text.strip(), forbid_dtd=True)
    except ET.ParseError as e:
        raise StorageFormatError(f"symstat: output is not XML ({e}): {text.strip()[:80]!r}") from None
    except DefusedXmlException as e:
        raise StorageFormatError(f"symstat: refused XML ({type(e).__name__})") from None
    out: dict[str, tuple[dict[str, str], dict[str, FieldValue]]] = {}
    for req in root.iter("Request"):
        values = {child.tag: child.text for child in req}
        dev = (values.get("dev_name") or "").strip()
        if not dev:
            raise StorageFormatError("symstat: a <Request> without <dev_name>")
        fields: dict[str, FieldValue] = {}
        for element, (field, factor) in FIELDS.items():
            value = optional_number(values.get(element), f"symstat {dev} {element}")
            if value is None and element in REQUIRED:
                raise StorageFormatError(f"symstat: device {dev} has no <{element}>")
            if value is not None:
                fields[field] = round(value * factor, 3)
        fields["total_iops"] = round(float(fields["read_iops"]) + float(fields["write_iops"]), 3)
        tags = {"device": dev}
        pd = (values.get("pd_name") or "").strip()
        if pd and pd != "N/A":
            tags["pd_name"] = pd
        out[dev] = (tags, fields)
    if not out and root.tag != "SymCLI_ML":  # the root of every SYMCLI XML report
        raise StorageFormatError(f"symstat: no <Request> elements in <{root.tag}>")
    return out
