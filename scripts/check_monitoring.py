#!/usr/bin/env python3
"""Static checks of monitoring/ (scripts/test.sh, tier 1, before promtool tests the alerts):
the exporter's queries file names metrics as id_gen.metrics does (id_gen_<family>_<column>,
each family one function of sql/cluster/metrics.sql, every metric of the view's VALUES in
the file and none else), and every id_gen_ metric that the alert rules and the Grafana
dashboard query is one the file exports. (tests/cluster/test_monitoring.py checks the same
file against a running server's id_gen.metrics and the real exporter's output.)

Exit status 1 with one line per problem."""
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
MON = ROOT / "monitoring"


def exported_metrics():
    """{metric name: (usage, description)} of monitoring/postgres_exporter.yml."""
    queries = yaml.safe_load((MON / "postgres_exporter.yml").read_text())
    out = {}
    for name, q in queries.items():
        for column in q["metrics"]:
            (col, spec), = column.items()
            if spec["usage"] != "LABEL":
                out[f"{name}_{col}"] = (spec["usage"], spec["description"])
    return out


def view_metrics():
    """The metric names sql/cluster/metrics.sql puts in id_gen.metrics."""
    sql = (ROOT / "sql/cluster/metrics.sql").read_text()
    view = sql[sql.index("CREATE OR REPLACE VIEW id_gen.metrics"):]
    return set(re.findall(r"'(id_gen_[a-z0-9_]+)'", view))


def queried(text):
    """id_gen_ metric names in PromQL text (a histogram's suffixes dropped)."""
    return {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"\bid_gen_[a-z0-9_]+", text)}


def main():
    problems = []
    exported = exported_metrics()
    view = view_metrics()
    for m in sorted(view - set(exported)):
        problems.append(f"postgres_exporter.yml does not export {m} (in id_gen.metrics)")
    for m in sorted(set(exported) - view):
        problems.append(f"postgres_exporter.yml exports {m}, which id_gen.metrics does not have")
    for m, (usage, _) in sorted(exported.items()):
        if usage not in ("GAUGE", "COUNTER"):
            problems.append(f"{m}: usage {usage} (GAUGE or COUNTER)")
        if usage == "COUNTER" and not m.endswith("_total"):
            problems.append(f"{m}: a counter's name ends in _total")
    rules = yaml.safe_load((MON / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            for m in sorted(queried(rule["expr"]) - set(exported)):
                problems.append(f"alerts.yml: {rule['alert']} queries {m}, which is not exported")
    dashboard = json.loads((MON / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v.get("query", "") for v in dashboard.get("templating", {}).get("list", [])
              if isinstance(v.get("query", ""), str)]
    if not exprs:
        problems.append("grafana-dashboard.json has no queries")
    for e in exprs:
        for m in sorted(queried(e) - set(exported)):
            problems.append(f"grafana-dashboard.json queries {m}, which is not exported ({e})")
    for p in problems:
        print(f"check_monitoring: {p}", file=sys.stderr)
    if not problems:
        print(f"check_monitoring: {len(exported)} metrics exported, as id_gen.metrics has them; "
              f"{sum(len(g['rules']) for g in rules['groups'])} alerts and {len(exprs)} dashboard queries name only those")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
