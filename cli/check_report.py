"""``symshape check`` results as text, JSON, JUnit XML and GitHub workflow annotations.

Example::

    >>> from cli.contracts import Contract
    >>> from validation.contracts.findings import FAIL, EntryResult, Finding
    >>> r = EntryResult(contract=Contract(name="m", program="m.py:f", inputs=["x: f32[B]"], dims={},
    ...                                   expectations={"max_guards": 0}, source="symshape.toml", line=3))
    >>> r.findings.append(Finding(expectation="max_guards", status=FAIL,
    ...                           message="1 guards, the contract allows 0", file="m.py", line=7))
    >>> print(github([r]))
    ::error file=m.py,line=7,title=symshape contract m%3A max_guards::1 guards, the contract allows 0
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from validation.contracts.findings import ERROR, FAIL, PASS, UNDECIDED

FORMATS = ("text", "json", "junit", "github")
_MARK = {PASS: "ok", FAIL: "FAIL", UNDECIDED: "UNDECIDED", ERROR: "ERROR"}


def summary(results) -> dict:
    """Counts of entries and findings by status."""
    fs = [f for r in results for f in r.findings]
    return {"entries": len(results), "entries_ok": sum(r.ok for r in results),
            **{s: sum(f.status == s for f in fs) for s in (PASS, FAIL, UNDECIDED, ERROR)}}


def text(results) -> str:
    """One line per expectation; failures add where, the counterexample and the fix."""
    out = []
    for r in results:
        c = r.contract
        out.append(f"{'PASS' if r.ok else 'FAIL'}  {c.name}  ({c.program}, {r.elapsed:.1f} s)")
        for f in r.findings:
            out.append(f"  [{_MARK[f.status]}] {f.expectation}: {f.message}")
            if f.status == PASS:
                continue
            if f.file:
                out.append(f"      at {f.file}:{f.line}" + (f"   {f.code.strip()}" if f.code else ""))
            if f.counterexample:
                out.append("      counterexample: " + ", ".join(f"{k}={v}" for k, v in f.counterexample.items()))
            if f.fix:
                out.append(f"      fix: {f.fix}")
    s = summary(results)
    out.append(f"{s['entries_ok']}/{s['entries']} contract(s) hold; {s[PASS]} expectation(s) proved, "
               f"{s[FAIL]} failed, {s[UNDECIDED]} undecided, {s[ERROR]} error(s)")
    return "\n".join(out) + "\n"


def to_json(results) -> str:
    return json.dumps({"ok": all(r.ok for r in results), "summary": summary(results),
                       "contracts": [r.to_dict() for r in results]}, indent=2) + "\n"


def _detail(f) -> str:
    lines = [f.message]
    if f.file:
        lines.append(f"at {f.file}:{f.line}" + (f"  {f.code.strip()}" if f.code else ""))
    if f.counterexample:
        lines.append("counterexample: " + ", ".join(f"{k}={v}" for k, v in f.counterexample.items()))
    if f.fix:
        lines.append(f"fix: {f.fix}")
    return "\n".join(lines)


def junit(results) -> str:
    """JUnit XML: a test suite per contract, a test case per expectation."""
    root = ET.Element("testsuites", name="symshape check")
    tot = {"tests": 0, "failures": 0, "errors": 0}
    for r in results:
        c = r.contract
        suite = ET.SubElement(root, "testsuite", name=c.name, file=c.source, time=f"{r.elapsed:.3f}")
        n = {"tests": 0, "failures": 0, "errors": 0}
        for f in r.findings:
            case = ET.SubElement(suite, "testcase", classname=f"symshape.{c.name}", name=f.expectation,
                                 file=f.file or c.source, line=str(f.line or c.line))
            n["tests"] += 1
            if f.status in (FAIL, UNDECIDED):
                el = ET.SubElement(case, "failure", message=f.message, type=f.status)
                el.text = _detail(f)
                n["failures"] += 1
            elif f.status == ERROR:
                el = ET.SubElement(case, "error", message=f.message, type="error")
                el.text = _detail(f)
                n["errors"] += 1
        for k, v in n.items():
            suite.set(k, str(v))
            tot[k] += v
    for k, v in tot.items():
        root.set(k, str(v))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _esc_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _esc_prop(s: str) -> str:
    return _esc_data(s).replace(":", "%3A").replace(",", "%2C")


def github(results) -> str:
    """GitHub workflow commands: ``::error file=F,line=L,title=T::message`` per failing expectation,
    at the user line that breaks the contract (else the contract entry's line)."""
    out = []
    for r in results:
        c = r.contract
        for f in r.findings:
            if f.status == PASS:
                continue
            level = "warning" if f.status == UNDECIDED else "error"
            file, line = (f.file, f.line) if f.file and not f.file.startswith(("<", "site-packages")) \
                else (c.source, c.line)
            body = f.message
            if f.counterexample:
                body += "\ncounterexample: " + ", ".join(f"{k}={v}" for k, v in f.counterexample.items())
            if f.fix:
                body += f"\nfix: {f.fix}"
            out.append(f"::{level} file={_esc_prop(file)},line={line},"
                       f"title={_esc_prop(f'symshape contract {c.name}: {f.expectation}')}::{_esc_data(body)}")
    return "\n".join(out)


def render(results, fmt: str) -> str:
    if fmt == "json":
        return to_json(results)
    if fmt == "junit":
        return junit(results)
    if fmt == "github":
        g = github(results)
        return (g + "\n" if g else "") + text(results).splitlines()[-1] + "\n"
    return text(results)
