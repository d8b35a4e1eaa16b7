#!/usr/bin/env python3
"""Checks packaging/monitoring's dashboard and alert rules (test/monitoring/check.sh runs it).

  check.py prepare ALERTS DASHBOARD OUTDIR
      Checks the dashboard's structure (schema version, the datasource and instance variables,
      every panel on ${datasource}, unique ids and refIds, panels inside the 24-column grid and
      not on top of each other) and writes into OUTDIR:
        dashboard-rules.yaml  each dashboard expression (targets and the instance variable's
                              query), Grafana's variables replaced by concrete values, as a
                              recording rule, for `promtool check rules` to parse;
        alerts.yaml           the alert rules without their annotations, for `promtool test
                              rules` (which compares annotations too).
  check.py names ALERTS DASHBOARD SCRAPE
      Checks that every metric name and every label name of every expression is one that the
      scrape of a running cri-dockerd (SCRAPE, Prometheus' text format) has, a target label
      Prometheus adds (job, instance) or `up`; that the label values that matchers select
      (label="v", each alternative of label=~"a|b") are in the scrape; and that every
      cri_dockerd_* metric family of the scrape has a panel.

PromQL is read by a small tokenizer, not a full parser: enough for the names, since promtool
has already parsed every expression.
"""
import difflib
import json
import re
import sys

import yaml

# Labels that Prometheus gives every scraped series (the target's).
TARGET_LABELS = {"job", "instance"}
# Series that Prometheus makes itself, with the target labels only.
SYNTHETIC = {"up": set(TARGET_LABELS)}

AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile"}
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp",
    "floor", "histogram_quantile", "holt_winters", "hour", "idelta", "increase", "irate",
    "label_join", "label_replace", "ln", "log2", "log10", "minute", "month", "predict_linear",
    "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc", "sqrt", "time", "timestamp",
    "vector", "year", "avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
    "count_over_time", "quantile_over_time", "stddev_over_time", "stdvar_over_time",
    "last_over_time", "present_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "cos", "cosh", "sin", "sinh", "tan", "tanh", "deg", "rad", "pi",
}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}

# Grafana's variables, as the check substitutes them.
GRAFANA_VARS = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
    "instance": "127.0.0.1:9099",
}

TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<duration>\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)
  | (?P<number>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<matchop>=~|!~|!=|==|=)
  | (?P<punct>[(){},])
  | (?P<op>>=|<=|[-+*/%^<>])
""", re.VERBOSE)


def fail(msg):
    print(f"monitoring check: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def tokens(expr):
    pos, out = 0, []
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read {expr[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
    return out


def names(expr, matchers=None):
    """The metric names, and the label names of each, of expr: ({metric: {labels in its
    matchers}}, labels of by/without/on/ignoring/group_* clauses, matchers' labels without a
    metric name). matchers, when given, gets each (metric, label, operator, value)."""
    toks = tokens(expr)
    metrics, grouping, bare = {}, set(), set()
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else (None, None)
        if kind == "ident" and text in GROUPING:
            i += 1
            if i < len(toks) and toks[i] == ("punct", "("):
                i += 1
                while toks[i] != ("punct", ")"):
                    if toks[i][0] == "ident":
                        grouping.add(toks[i][1])
                    elif toks[i] != ("punct", ","):
                        raise ValueError(f"{text}(...) holds {toks[i][1]!r}")
                    i += 1
                i += 1
            continue
        if kind == "ident" and text in AGGREGATIONS and nxt[1] in ("by", "without"):
            i += 1  # sum by (x) (...): the clause is read next
            continue
        if kind == "ident" and nxt == ("punct", "("):
            if text not in AGGREGATIONS and text not in FUNCTIONS:
                raise ValueError(f"unknown function {text}()")
            i += 1
            continue
        if kind == "ident" and text.lower() in KEYWORDS:
            i += 1
            continue
        if kind == "ident" or (kind == "punct" and text == "{"):
            metric = text if kind == "ident" else None
            labels = set()
            if kind == "ident":
                i += 1
            if i < len(toks) and toks[i] == ("punct", "{"):
                i += 1
                while toks[i] != ("punct", "}"):
                    if toks[i] == ("punct", ","):
                        i += 1
                        continue
                    if toks[i][0] != "ident" or toks[i + 1][0] != "matchop" or toks[i + 2][0] != "string":
                        raise ValueError(f"a label matcher reads {' '.join(t for _, t in toks[i:i + 3])!r}")
                    if toks[i][1] == "__name__":
                        raise ValueError("a metric named by __name__ cannot be checked: name it")
                    labels.add(toks[i][1])
                    if matchers is not None and metric is not None:
                        matchers.append((metric, toks[i][1], toks[i + 1][1], unquote(toks[i + 2][1])))
                    i += 3
                i += 1
            if metric is None:
                bare |= labels
            else:
                metrics.setdefault(metric, set()).update(labels)
            continue
        i += 1
    return metrics, grouping, bare


def unquote(literal):
    if literal[0] == "`":
        return literal[1:-1]
    return re.sub(r"\\(.)", r"\1", literal[1:-1])


def alternatives(regex):
    """The top-level alternatives of a regular expression: "(a|b) c|d" is "(a|b) c" and "d"."""
    out, depth, cur = [], 0, ""
    for ch in regex:
        if ch == "|" and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        cur += ch
    return out + [cur]


def grafana_substitute(expr):
    def sub(m):
        name = m.group(1) or m.group(2)
        if name not in GRAFANA_VARS:
            fail(f"unknown Grafana variable ${name} in {expr!r}")
        return GRAFANA_VARS[name]
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", sub, expr)


def load(alerts_path, dashboard_path):
    with open(alerts_path) as f:
        alerts = yaml.safe_load(f)
    with open(dashboard_path) as f:
        dash = json.load(f)
    return alerts, dash


def alert_exprs(alerts):
    out = []
    for g in alerts["groups"]:
        for r in g["rules"]:
            out.append((f"alert {r.get('alert') or r.get('record')}", r["expr"]))
    return out


def panels(dash):
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])


def dashboard_exprs(dash):
    """(where, expression as written) of every target and of the instance variable's query."""
    out = []
    for p in panels(dash):
        for t in p.get("targets", []):
            out.append((f"panel {p['id']} {p['title']!r} target {t['refId']}", t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q.strip())
            if not m:
                fail(f"variable {v['name']}: query {q!r} is not label_values(EXPR, LABEL)")
            out.append((f"variable {v['name']}", m.group(1)))
            out.append((f"variable {v['name']} label", f"group by ({m.group(2)}) ({m.group(1)})"))
    return out


def check_dashboard(dash):
    if not 36 <= dash.get("schemaVersion", 0) <= 41:
        fail(f"schemaVersion {dash.get('schemaVersion')}, want about 39")
    if not dash.get("uid") or not dash.get("title"):
        fail("the dashboard has no uid or title")
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds = variables.get("datasource")
    if not ds or ds["type"] != "datasource" or ds["query"] != "prometheus":
        fail("no datasource variable of type datasource for prometheus")
    inst = variables.get("instance")
    if not inst or inst["type"] != "query" or inst["datasource"].get("uid") != "${datasource}":
        fail("no instance variable queried on ${datasource}")
    ids, cells = set(), {}
    for p in panels(dash):
        if p["id"] in ids:
            fail(f"panel id {p['id']} twice")
        ids.add(p["id"])
        g = p["gridPos"]
        if g["x"] < 0 or g["w"] <= 0 or g["x"] + g["w"] > 24 or g["h"] <= 0:
            fail(f"panel {p['id']} {p['title']!r} is outside the 24-column grid: {g}")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    fail(f"panel {p['id']} {p['title']!r} lies on panel {cells[(x, y)]}")
                cells[(x, y)] = p["id"]
        if p["type"] == "row":
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            fail(f"panel {p['id']} {p['title']!r} is not on ${{datasource}}")
        targets = p.get("targets", [])
        if not targets:
            fail(f"panel {p['id']} {p['title']!r} has no target")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or None in refs:
            fail(f"panel {p['id']} {p['title']!r}: refIds {refs}")
        for t in targets:
            if t.get("datasource", {}).get("uid") != "${datasource}" or not t.get("expr"):
                fail(f"panel {p['id']} {p['title']!r} target {t.get('refId')}: no expr on ${{datasource}}")
            if not re.search(r'instance=~"\$(instance|\{instance\})"', t["expr"]):
                fail(f"panel {p['id']} {p['title']!r} target {t['refId']} ignores the instance variable")


def prepare(alerts_path, dashboard_path, outdir):
    alerts, dash = load(alerts_path, dashboard_path)
    check_dashboard(dash)
    for g in alerts["groups"]:
        for r in g["rules"]:
            for key in ("expr", "for", "labels", "annotations"):
                if key not in r:
                    fail(f"alert {r.get('alert')} has no {key}")
            if r["labels"].get("severity") not in ("critical", "warning", "info"):
                fail(f"alert {r['alert']}: severity {r['labels'].get('severity')!r}")
            if not r["annotations"].get("summary") or not r["annotations"].get("description"):
                fail(f"alert {r['alert']} needs a summary and a description")
            r.pop("annotations")
    with open(f"{outdir}/alerts.yaml", "w") as f:
        yaml.safe_dump(alerts, f, sort_keys=False)
    rules = []
    for n, (where, expr) in enumerate(dashboard_exprs(dash)):
        rules.append({"record": f"dashboard:expr_{n}", "expr": grafana_substitute(expr),
                      "labels": {"where": where}})
    with open(f"{outdir}/dashboard-rules.yaml", "w") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, sort_keys=False)
    print(f"dashboard: {sum(1 for p in panels(dash) if p['type'] != 'row')} panels, "
          f"{len(rules)} expressions; alerts: {len(alert_exprs(alerts))} rules")


def read_scrape(path):
    """{sample name: {label name: values}} of a scrape, and {family: type}."""
    samples, types = {}, {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("# TYPE "):
                _, _, family, kind = line.split(None, 3)
                types[family] = kind
                continue
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
            if not m:
                fail(f"cannot read the scrape's line {line!r}")
            labels = samples.setdefault(m.group(1), {})
            for name, value in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""):
                labels.setdefault(name, set()).add(unquote(f'"{value}"'))
    return samples, types


def family_of(sample, types):
    """The metric family a sample name belongs to: a histogram's _bucket, _sum and _count are
    its own; a counter's name is its family's."""
    if sample in types:
        return sample
    for suffix in ("_bucket", "_sum", "_count"):
        base = sample[:-len(suffix)]
        if sample.endswith(suffix) and (types.get(base) == "histogram" or
                                        (types.get(base) == "summary" and suffix != "_bucket")):
            return base
    return None


def check_names(alerts_path, dashboard_path, scrape_path):
    alerts, dash = load(alerts_path, dashboard_path)
    samples, types = read_scrape(scrape_path)
    known = {**{s: set(ls) | TARGET_LABELS for s, ls in samples.items()}, **SYNTHETIC}
    errors, used_metrics, used_labels, families_used = [], set(), set(), set()
    values_checked = 0
    label_values = {}
    for labels in samples.values():
        for label, values in labels.items():
            label_values.setdefault(label, set()).update(values)
    exprs = alert_exprs(alerts) + dashboard_exprs(dash)
    for where, expr in exprs:
        try:
            matchers = []
            metrics, grouping, bare = names(grafana_substitute(expr), matchers)
        except ValueError as e:
            errors.append(f"{where}: {e}")
            continue
        if not metrics:
            errors.append(f"{where}: names no metric")
        union = set(TARGET_LABELS)
        for metric, labels in metrics.items():
            used_metrics.add(metric)
            if metric not in known:
                near = difflib.get_close_matches(metric, known, n=2)
                errors.append(f"{where}: metric {metric} is not exported"
                              + (f" (did you mean {' or '.join(near)}?)" if near else ""))
                continue
            fam = family_of(metric, types) if metric not in SYNTHETIC else metric
            if metric not in SYNTHETIC and fam is None:
                errors.append(f"{where}: {metric} belongs to no metric family of the scrape")
            families_used.add(fam)
            union |= known[metric]
            for label in labels:
                used_labels.add(label)
                if label not in known[metric]:
                    errors.append(f"{where}: {metric} has no label {label} (it has {', '.join(sorted(known[metric]))})")
        for label in grouping | bare:
            used_labels.add(label)
            if label not in union:
                errors.append(f"{where}: label {label} is on none of {', '.join(sorted(metrics))}")
        # The values that a matcher selects (label="v", label=~"a|b": each alternative) must be
        # in the scrape, on some series with that label (an error counter has only the methods
        # that failed): the test's calls make every one that the rules and panels name.
        for metric, label, op, value in matchers:
            if label in TARGET_LABELS or label not in samples.get(metric, {}) or op not in ("=", "=~"):
                continue
            have = label_values.get(label, set())
            wanted = [value] if op == "=" else alternatives(value)
            for alt in wanted:
                values_checked += 1
                if not any(v == alt if op == "=" else re.fullmatch(alt, v) for v in have):
                    errors.append(f"{where}: no series has {label}{op}{alt!r} "
                                  f"(the scrape has {', '.join(sorted(have))})")
    ours = {f for f in types if f.startswith("cri_dockerd_")}
    dash_families = set()
    for _, expr in dashboard_exprs(dash):
        for metric in names(grafana_substitute(expr))[0]:
            dash_families.add(family_of(metric, types))
    for fam in sorted(ours - dash_families):
        errors.append(f"metric {fam} is exported but on no dashboard panel")
    for e in errors:
        print(f"monitoring check: {e}", file=sys.stderr)
    if errors:
        fail(f"{len(errors)} problem(s) with the names of {len(exprs)} expressions")
    print(f"names: {len(exprs)} expressions use {len(used_metrics)} metric names "
          f"({len(families_used)} families, {len(families_used & ours)} of cri-dockerd's {len(ours)}) "
          f"and {len(used_labels)} label names ({', '.join(sorted(used_labels))}), all exported; "
          f"{values_checked} label values that matchers select are in the scrape; "
          f"the scrape has {len(types)} families, {len(samples)} sample names")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "prepare":
        prepare(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "names":
        check_names(*sys.argv[2:])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
