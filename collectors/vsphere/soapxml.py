"""vSphere SOAP XML as plain Python values, for every call the collector makes.

pyvmomi's deserializer builds a typed object per element in pure Python: ~8 ms per VM
with its device list, 15 s for 2,000 VMs. The answers are parsed with ElementTree instead,
and read lazily: a complex value is a Node
over its element (only the fields a caller asks for are converted), an array is a list, a
managed object reference is a Ref, leaves are strings unless their xsi:type says number or
boolean. Callers convert leaves explicitly.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape, quoteattr

from db2vtop.agent.core.model import SHORT_TEXT

NS = "{urn:vim25}"
XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"
_INT_TYPES = {"xsd:int", "xsd:long", "xsd:short", "xsd:byte"}
ENVELOPE = ('<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope '
            'xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" '
            'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body>{}</soapenv:Body></soapenv:Envelope>')


class Ref(NamedTuple):
    type: str
    value: str


def envelope(body: str) -> bytes:
    return ENVELOPE.format(body).encode()


def this(type_: str, moid: str) -> str:
    return f"<_this type={quoteattr(type_)}>{escape(moid)}</_this>"


def _tag(el: ET.Element) -> str:
    t = el.tag
    return t[len(NS):] if t.startswith(NS) else t


class Node:
    """A complex value: `get(field)` converts that child on demand (a list if it repeats)."""

    __slots__ = ("el",)

    def __init__(self, el: ET.Element):
        self.el = el

    @property
    def type(self) -> str:
        return self.el.get(XSI_TYPE) or _tag(self.el)

    def get(self, key: str, default: Any = None) -> Any:
        if key == "_type":
            return self.type
        found = self.el.findall(NS + key)
        if not found:
            return default
        if len(found) == 1:
            return value(found[0])
        return [value(c) for c in found]

    def __contains__(self, key: str) -> bool:
        return self.el.find(NS + key) is not None


def value(el: ET.Element) -> Any:
    if len(el) == 0:
        # interned: rows kept for the process's life (the light inventory of every VM, facts) repeat a
        # state, a type or a host's id thousands of times; held once each
        text = el.text
        if not text:
            text = ""
        elif len(text) <= SHORT_TEXT:
            text = sys.intern(text)
        ref_type = el.get("type")  # (not el.attrib: that makes a dict for every element asked)
        if ref_type is not None:
            return Ref(sys.intern(ref_type), text)
        xtype = el.get(XSI_TYPE)
        if xtype in _INT_TYPES:
            return to_int(text, text)
        if xtype == "xsd:boolean":
            return text == "true"
        return text
    xtype = el.get(XSI_TYPE)
    if xtype and xtype.startswith("ArrayOf"):
        return [value(c) for c in el]
    return Node(el)


def as_list(v: Any) -> list:
    """A repeated field that occurred once is a single value; make it a list either way."""
    if v is None or v == "":
        return []
    return v if isinstance(v, list) else [v]


def to_int(v: Any, default: int | None = None) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def to_bool(v: Any) -> bool:
    return v is True or v == "true"
