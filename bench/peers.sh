#!/usr/bin/env bash
# The peers on one shaped lab (htb 100mbit with a bfifo of 300000 bytes on both
# ends, GSO off, the machine's default congestion control), tcp_4down, pairs
# alternating which tool goes first, and a table of ratios:
#   - bloatbench tcp_4down against iperf3 -P 4 -R with iputils ping -i 0.2 beside it:
#     the loaded ping's median (iperf3's: the replies while its streams ran, less
#     their first and last second), Jain's index of the flows and their sum;
#   - bloatbench tcp_4down with netperf's socket use (--te send_size=16384
#     --te recv_size=131072) against flent's tcp_4down (netperf 2.7), when flent and
#     netperf are installed: the same, flent's file read by bloatbench summary.
# Each ratio is the median of the pairs' ratios. BBR's drains (docs/labs.md) make
# single runs of either tool differ by up to 20%: read the pairs, not one run.
# Usage: bash bench/peers.sh [SECONDS] [PAIRS] (as root; default 30 s, 3 pairs;
# BENCH_KEEP=DIR keeps peers.csv)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
pairs=${2:-3}
bb=./bloatbench
[ -x "$bb" ] || go build -o "$bb" ./cmd/bloatbench
work=$(mktemp -d)
inv="$work/shaped.yaml"
cleanup() {
  if [ -n "${BENCH_KEEP:-}" ]; then
    mkdir -p "$BENCH_KEEP" && cp "$work/peers.csv" "$BENCH_KEEP"/ 2>/dev/null || true
  fi
  [ -z "${netserver:-}" ] || kill "$netserver" 2>/dev/null || true
  "$bb" testbed down -H "$inv" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
"$bb" testbed up --out "$inv" --rate 100mbit --queue bfifo:300000 --gso off >/dev/null
lab=$(sed -n 's/^testbed: //p' "$inv")
cns="$lab-client" sns="$lab-server"
server=$(ip -n "$sns" -4 -o addr show dev test0 | awk '{print $4}' | cut -d/ -f1)

# one line of peers.csv: pair,tool,loaded ping median,sum,flow1 flow2 flow3 flow4
echo "pair,tool,ping,sum,flows" > "$work/peers.csv"
summary_row() { # a summary's JSON on stdin: ping,sum,flows
  python3 -c '
import json, sys
d = json.load(sys.stdin)
r = {x["name"]: x for x in d["runs"][0]["rows"]}
flows = [r["TCP download::%d" % i]["avg"] for i in range(1, 5)]
print("%.3f,%.3f,%s" % (r["Ping (ms) ICMP loaded"]["median"], r["TCP download sum"]["median"], " ".join("%.3f" % f for f in flows)))'
}
ours() { # pair, tool name, extra run arguments
  local p=$1 name=$2
  shift 2
  echo "$p,$name,$("$bb" run -H "$inv" -l "$secs" -d 2 -o "$work/res" -f json "$@" tcp_4down 2>>"$work/run.log" | summary_row)" >> "$work/peers.csv"
}
iperf3_run() {
  local p=$1
  ip netns exec "$sns" iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
  local srv=$!
  ip netns exec "$cns" ping -D -n -i 0.2 -w $((secs + 5)) "$server" > "$work/ping.txt" &
  local pp=$!
  sleep 2
  ip netns exec "$cns" iperf3 -c "$server" -p 5299 -P 4 -R -t "$secs" -J > "$work/iperf3.json"
  kill -INT "$pp" 2>/dev/null || true
  wait "$pp" "$srv" 2>/dev/null || true
  echo "$p,iperf3,$(python3 - "$work/iperf3.json" "$work/ping.txt" <<'PY'
import json, re, statistics, sys
d = json.load(open(sys.argv[1]))
t0 = d["start"]["timestamp"]["timesecs"]
# iperf3's start is whole seconds: its streams ran from within a second after it;
# their first and last second are left out.
a, b = t0 + 2, t0 + d["intervals"][-1]["sum"]["end"] - 1
rtt = [float(m.group(2)) for l in open(sys.argv[2]) for m in [re.match(r"\[(\d+\.\d+)\].*time=([0-9.]+)", l)] if m and a <= float(m.group(1)) <= b]
flows = [s["receiver"]["bits_per_second"] / 1e6 for s in d["end"]["streams"]]
print("%.3f,%.3f,%s" % (statistics.median(rtt), sum(flows), " ".join("%.3f" % f for f in flows)))
PY
)" >> "$work/peers.csv"
}
flent_run() {
  local p=$1
  rm -rf "$work/flent" && mkdir -p "$work/flent"
  (cd "$work/flent" && ip netns exec "$cns" flent tcp_4down -H "$server" -l "$secs" -s 0.2 --netperf-control-port 12865 -D . >"$work/flent.log" 2>&1)
  echo "$p,flent,$("$bb" summary -f json "$work"/flent/*.flent.gz | summary_row)" >> "$work/peers.csv"
}

for p in $(seq "$pairs"); do
  if [ $((p % 2)) -eq 1 ]; then ours "$p" bloatbench; iperf3_run "$p"; else iperf3_run "$p"; ours "$p" bloatbench; fi
done
have_flent=""
if command -v flent >/dev/null && command -v netperf >/dev/null; then
  have_flent=1
  ip netns exec "$sns" netserver -D -p 12865 >/dev/null 2>&1 &
  netserver=$!
  sleep 0.5
  for p in $(seq "$pairs"); do
    np=(--te send_size=16384 --te recv_size=131072)
    if [ $((p % 2)) -eq 1 ]; then ours "$p" netperf-like "${np[@]}"; flent_run "$p"; else flent_run "$p"; ours "$p" netperf-like "${np[@]}"; fi
  done
fi

python3 - "$work/peers.csv" "$secs" "$pairs" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
secs, pairs = sys.argv[2], sys.argv[3]
def jain(fl):
    return sum(fl) ** 2 / (len(fl) * sum(f * f for f in fl))
def runs(tool):
    return {r["pair"]: (float(r["ping"]), float(r["sum"]), jain([float(x) for x in r["flows"].split()])) for r in rows if r["tool"] == tool}
def table(ours, theirs, label):
    a, b = runs(ours), runs(theirs)
    ps = sorted(set(a) & set(b))
    if not ps:
        return
    for i, name, fmt in ((0, "loaded ICMP RTT median, ms", "%.2f"), (2, "Jain's index of the 4 flows", "%.4f"), (1, "TCP download sum, Mbit/s", "%.2f")):
        x = statistics.median(a[p][i] for p in ps)
        y = statistics.median(b[p][i] for p in ps)
        ratio = statistics.median(a[p][i] / b[p][i] for p in ps)
        each = " ".join("%.2f" % (a[p][i] / b[p][i]) for p in ps)
        print(f"| {label}: {name} (pairs: {each}) | {fmt % x} | {fmt % y} | {ratio:.3f} |")
print(f"\nPeers on one shaped lab (htb 100mbit, bfifo 300000, GSO off), tcp_4down, {secs} s runs, {pairs} pairs alternating which goes first; each column the median of its runs, the ratio the median of the pairs' ratios\n")
print("| measure | bloatbench | reference | ratio (bloatbench / reference) |")
print("|---|---:|---:|---:|")
table("bloatbench", "iperf3", "vs iperf3 -P 4 -R, ping -i 0.2 beside")
table("netperf-like", "flent", "--te send_size=16384 --te recv_size=131072 vs flent tcp_4down (netperf 2.7)")
PY
[ -n "$have_flent" ] || echo "(flent or netperf is not installed: no comparison with flent)"
