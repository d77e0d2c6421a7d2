#!/usr/bin/env bash
# Measures bloatbench against the reference tools, side by side in one run on a
# local lab (network namespaces on this machine), and prints ratios:
#   - TCP throughput and CPU: bloatbench tcp_4down vs iperf3 -P 4 -R (both download,
#     4 streams, unshaped veth, so both are bound by CPU: throughput per CPU second
#     says how much of the machine each tool's own work takes);
#   - idle ICMP RTT: bloatbench's kernel-timestamped ping vs fping, run at the same time.
# Usage: bash bench/compare.sh [SECONDS] [ROUNDS]   (as root; make bench builds first)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
bb=./bloatbench
[ -x "$bb" ] || go build -o "$bb" ./cmd/bloatbench
work=$(mktemp -d)
inv="$work/lab.yaml"
cleanup() { "$bb" testbed down -H "$inv" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
"$bb" testbed up --out "$inv" >/dev/null
lab=$(sed -n 's/^testbed: //p' "$inv")
cns="$lab-client" sns="$lab-server"
server_ip=$(ip -n "$sns" -4 -o addr show dev test0 | awk '{print $4}' | cut -d/ -f1)

# busy CPU seconds of the whole machine, from /proc/stat (user+nice+system+irq+softirq)
cpu() { awk '/^cpu /{printf "%.3f\n", ($2+$3+$4+$7+$8)/100}' /proc/stat; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

echo "round,tool,mbits,cpu_seconds" > "$work/tput.csv"
for r in $(seq "$rounds"); do
  c0=$(cpu)
  out=$("$bb" run -H "$inv" -l "$secs" -d 0 -o "$work/res" --format json tcp_4down 2>/dev/null)
  c1=$(cpu)
  mb=$(echo "$out" | json "[r['median'] for r in d['runs'][0]['rows'] if r['name']=='TCP download sum'][0]")
  echo "$r,bloatbench,$mb,$(awk -v a="$c0" -v b="$c1" 'BEGIN{print b-a}')" >> "$work/tput.csv"

  ip netns exec "$sns" iperf3 -s -1 >/dev/null 2>&1 &
  sleep 0.5
  c0=$(cpu)
  out=$(ip netns exec "$cns" iperf3 -c "$server_ip" -P 4 -R -t "$secs" -J)
  c1=$(cpu)
  wait
  mb=$(echo "$out" | json "d['end']['sum_received']['bits_per_second']/1e6")
  echo "$r,iperf3,$mb,$(awk -v a="$c0" -v b="$c1" 'BEGIN{print b-a}')" >> "$work/tput.csv"
done

# Idle ping: both probe every 200 ms at the same time for the same span.
n=$((secs * 5))
ip netns exec "$cns" fping -D -p 200 -c "$n" "$server_ip" > "$work/fping.txt" 2>&1 &
out=$("$bb" run -H "$inv" -l "$secs" -d 0 -o "$work/res" --format json --te download_streams=0 tcp_ndown 2>/dev/null)
wait
ours=$(echo "$out" | json "[r['median'] for r in d['runs'][0]['rows'] if r['name']=='Ping (ms) ICMP'][0]")
theirs=$(python3 - "$work/fping.txt" <<'PY'
import re, statistics, sys
v = [float(m.group(1)) for m in re.finditer(r"\[\d+\], \d+ bytes, ([0-9.]+) ms", open(sys.argv[1]).read())]
print(statistics.median(v))
PY
)

python3 - "$work/tput.csv" "$ours" "$theirs" "$secs" "$rounds" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ours_ping, fping, secs, rounds = float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
def med(tool, f):
    return statistics.median(f(r) for r in rows if r["tool"] == tool)
bm, im = med("bloatbench", lambda r: float(r["mbits"])), med("iperf3", lambda r: float(r["mbits"]))
bc, ic = med("bloatbench", lambda r: float(r["cpu_seconds"])), med("iperf3", lambda r: float(r["cpu_seconds"]))
# Throughput per busy CPU second: the tools' efficiency when the CPU is the limit.
be, ie = bm * float(secs) / bc, im * float(secs) / ic
print(f"bloatbench vs reference tools, local lab, {secs} s per run, median of {rounds} rounds\n")
print("| measure | bloatbench | reference | ratio (bloatbench / reference) |")
print("|---|---:|---:|---:|")
print(f"| TCP 4 streams down, Mbit/s (iperf3 -P 4 -R) | {bm:.0f} | {im:.0f} | {bm/im:.2f} |")
print(f"| CPU busy during the run, core-seconds | {bc:.1f} | {ic:.1f} | {bc/ic:.2f} |")
print(f"| Mbit per CPU core-second | {be:.0f} | {ie:.0f} | {be/ie:.2f} |")
print(f"| idle ICMP RTT median, ms (fping -p 200) | {ours_ping:.3f} | {fping:.3f} | {ours_ping/fping:.2f} |")
PY
