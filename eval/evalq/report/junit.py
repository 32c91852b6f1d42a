"""JUnit XML for CI (`evalq gate --junit`): one testcase per variant × gate, and one per
pipeline combination × gate in a second testsuite, so a CI's test view lists every
verdict the run decided. Failed and inconclusive gates carry a ``<failure>`` with the
reason (``type`` is the verdict). Decisions stay in ``evalq.decide.gate``; this only writes them.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping

from evalq.core.gates import VariantGate
from evalq.results.hostpart import HostPart


def _figure(value: object) -> object:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def host_properties(host: HostPart | None) -> dict[str, str]:
    """The host facts a CI's test view shows beside the verdicts (``evalq.host.*``): a
    verdict holds for the numerics class it was decided on."""
    if host is None:
        return {}
    props: dict[str, object] = {
        "evalq.host.numerics_class": host.numerics_class,
        "evalq.host.cpu_model": host.cpu_model, "evalq.host.cpu_vendor": host.cpu_vendor,
        "evalq.host.flags": " ".join(host.flags), "evalq.host.cores": host.cores,
        "evalq.host.os": host.os}
    for engine, version in host.engines.items():
        props[f"evalq.host.engines.{engine}"] = version
    for cap, value in host.isa_caps.items():
        props[f"evalq.host.isa_caps.{cap}"] = value
    return {k: str(v) for k, v in props.items() if v not in (None, "")}


def _suite(root: ET.Element, name: str, verdicts: Mapping[str, VariantGate],
           properties: Mapping[str, str]) -> tuple[int, int]:
    cases = [(label, check) for label, gate in verdicts.items() for check in gate.checks]
    failures = sum(1 for _, check in cases if not check.passed)
    suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(cases)),
                          failures=str(failures), errors="0", skipped="0")
    if properties:
        props = ET.SubElement(suite, "properties")
        for key, value in properties.items():
            ET.SubElement(props, "property", name=key, value=value)
    for label, check in cases:
        # pipeline labels are "pipeline NAME DATASET COMBINATION": dotted like a class
        dotted = label.removeprefix("pipeline ").replace(" ", ".")
        case = ET.SubElement(suite, "testcase", classname=f"{name}.{dotted}", name=check.gate)
        if check.passed:
            ET.SubElement(case, "system-out").text = check.reason
        else:
            failure = ET.SubElement(case, "failure", message=check.reason, type=check.verdict)
            failure.text = "\n".join(f"{key}: {_figure(value)}"
                                     for key, value in check.figures.items())
    return len(cases), failures


def to_junit(verdicts: Mapping[str, VariantGate], suite_name: str = "evalq",
             pipelines: Mapping[str, VariantGate] | None = None,
             host: HostPart | None = None) -> str:
    """``verdicts`` by variant; ``pipelines`` by the label `evalq gate` prints
    (``pipeline dense-ce pydocs fp32+dyn-int8@5``), written as ``<suite_name>.pipelines``;
    ``host`` (a results folder's host facts) as each suite's properties."""
    root = ET.Element("testsuites", name=suite_name)
    properties = host_properties(host)
    tests, failures = _suite(root, suite_name, verdicts, properties)
    if pipelines:
        more, failed = _suite(root, f"{suite_name}.pipelines", pipelines, properties)
        tests, failures = tests + more, failures + failed
    root.set("tests", str(tests))
    root.set("failures", str(failures))
    root.set("errors", "0")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
