#!/usr/bin/env bash
# Measures bloatbench against the reference tools, side by side in one run on local
# labs (network namespaces on this machine), and prints ratios:
#   - TCP throughput and CPU: bloatbench tcp_4down vs iperf3 -P 4 -R (both download,
#     4 streams, unshaped veth, so both are bound by CPU: throughput per CPU second
#     says how much of the machine each tool's own work takes), rounds alternating
#     which tool goes first;
#   - scaling: 1, 2, 4, 8 and 16 download streams (tcp_ndown) against iperf3 -P N -R,
#     rounds alternating which tool goes first, throughput and Mbit per CPU
#     core-second (the whole run for both, and bloatbench's streams' time);
#   - sampling cost: tcp_4down at a 4x shorter step (4x the qdisc, stream and ping
#     samples) against the default step, and with the sojourn sampler (the BPF
#     programs on every qdisc enqueue and dequeue; on a lab with a pfifo root)
#     against without it, each in pairs of short runs back to back, with the
#     ratio's 95% interval;
#   - idle ICMP RTT: bloatbench's kernel-timestamped ping vs fping, at the same time;
#   - probe loss: an idle ping at a 10 ms interval over the scale run's length, and
#     fping -p 10 alongside;
#   - loaded ICMP RTT: the same through a shaped lab (htb 100mbit, bfifo 300000, GSO
#     off) while tcp_4down runs, over the streams' time;
#   - peers on one shaped lab (bench/peers.sh, run last, its own table): tcp_4down
#     against iperf3 -P 4 -R with ping beside it, and with netperf's socket use
#     against flent's tcp_4down: loaded ping, fairness and sum, pairs alternating;
#   - overhead: a ping-only run's wall time against its length + 2 x delay, and against
#     flent's own `ping` test of the same length (when flent is installed);
#   - scale: tcp_ndown with 1024 streams: peak RSS of the controller and of each agent,
#     the data file's size, how long `summary` takes on it, and how many series miss
#     more than 5% of their grid.
# Usage: bash bench/compare.sh [SECONDS] [ROUNDS] [SCALE_SECONDS]
#   (as root; make bench builds first; defaults 10 s, 3 rounds, 60 s for the scale run;
#   BENCH_STREAMS="1 2 4 8 16" sets the scaling table's stream counts;
#   BENCH_PAIRS and BENCH_PAIR_SECONDS the sampling rows' pairs, 16 of 3 s;
#   BENCH_PEER_PAIRS and BENCH_PEER_SECONDS the peers' table's, 3 of 30 s;
#   BENCH_KEEP=DIR keeps the per-run numbers there)
# Every table is headed by the machine it ran on: CPU model and count, kernel,
# default congestion control. Both tools run on the same lab with their defaults;
# bloatbench's streams send with sendfile and receive with MSG_TRUNC, iperf3
# copies (without -Z), as each does by default.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
scale_secs=${3:-60}
# The sampling rows' pairs: many short ones, not a few of SECONDS. Measured here
# (tcp_4down, unshaped, -s 0.05 against -s 0.2, which first alternating): 12 pairs
# of 3 s read 41.8-45.5 Gbit/s, the pairs' log ratios spread by 0.020 (standard
# deviation); 6 pairs of 10 s read 33.6-42.5, spread 0.067. A longer run is more
# likely to hold one of the machine's slow spells, which the other run of its pair
# does not, so at the same total time 16 pairs of 3 s measure the ratio about five
# times as closely as 6 of 10 s.
pairs=${BENCH_PAIRS:-16}
pair_secs=${BENCH_PAIR_SECONDS:-3}
bb=./bloatbench
[ -x "$bb" ] || go build -o "$bb" ./cmd/bloatbench
work=$(mktemp -d)
inv="$work/lab.yaml" shaped="$work/shaped.yaml" queued="$work/queued.yaml"
cleanup() {
  # BENCH_KEEP=DIR keeps every run's numbers (tput.csv: the tcp_4down rounds and the
  # sampling pairs; ladder.csv: the scaling rounds), so that a cell can be explained.
  if [ -n "${BENCH_KEEP:-}" ]; then
    mkdir -p "$BENCH_KEEP" && cp "$work"/*.csv "$BENCH_KEEP"/ 2>/dev/null || true
  fi
  touch "$work/cpu-trace.stop"
  # the tracer may not look for its stop file before the directory goes
  [ -z "${tracer:-}" ] || kill "$tracer" 2>/dev/null || true
  "$bb" testbed down -H "$shaped" >/dev/null 2>&1 || true
  "$bb" testbed down -H "$queued" >/dev/null 2>&1 || true
  "$bb" testbed down -H "$inv" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
"$bb" testbed up --out "$inv" >/dev/null
lab=$(sed -n 's/^testbed: //p' "$inv")
cns="$lab-client" sns="$lab-server"
server_ip=$(ip -n "$sns" -4 -o addr show dev test0 | awk '{print $4}' | cut -d/ -f1)

# busy CPU seconds of the whole machine, from /proc/stat (user+nice+system+irq+softirq)
cpu() { awk '/^cpu /{printf "%.3f\n", ($2+$3+$4+$7+$8)/100}' /proc/stat; }
now() { date +%s.%N; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
# the data file a run wrote, from its log
datafile() { sed -n 's/^data file: //p' "$1" | tail -1; }
sum_row() { json "[r['median'] for r in d['runs'][0]['rows'] if r['name']=='TCP download sum'][0]"; }

# run LOG ARGS...: a bloatbench run, its log kept, its JSON summary on stdout
run() { local log=$1; shift; "$bb" run -o "$work/res" --format json "$@" 2>"$log"; }

# The machine's busy CPU, every 20 ms, through the throughput rounds: one process
# reading /proc/stat (no fork per sample), so that the CPU of the streams' own time
# can be told from that of a run's set-up and end.
python3 - "$work/cpu-trace.txt" "$work/cpu-trace.stop" <<'PY' &
import os, sys, time
out, stop = open(sys.argv[1], "w"), sys.argv[2]
hz = os.sysconf("SC_CLK_TCK")
while not os.path.exists(stop):
    f = open("/proc/stat").readline().split()
    out.write("%.4f %.3f\n" % (time.time(), (int(f[1]) + int(f[2]) + int(f[3]) + int(f[6]) + int(f[7])) / hz))
    out.flush()
    time.sleep(0.02)
PY
tracer=$!
echo "round,tool,mbits,cpu_seconds,file" > "$work/tput.csv"
# Rounds alternate which tool goes first, as the scaling's do: here the first of
# two runs back to back made more than the second in most pairs (paired()
# below), and a tool always first would have that for its own.
for r in $(seq "$rounds"); do
  order="bloatbench iperf3"
  [ $((r % 2)) -eq 0 ] && order="iperf3 bloatbench"
  for tool in $order; do
    if [ "$tool" = bloatbench ]; then
      c0=$(cpu)
      mb=$(run "$work/tcp.log" -H "$inv" -l "$secs" -d 0 tcp_4down | sum_row)
      c1=$(cpu)
      echo "$r,bloatbench,$mb,$(awk -v a="$c0" -v b="$c1" 'BEGIN{print b-a}'),$(datafile "$work/tcp.log")" >> "$work/tput.csv"
    else
      ip netns exec "$sns" iperf3 -s -1 >/dev/null 2>&1 &
      iperf3_server=$!
      sleep 0.5
      c0=$(cpu)
      out=$(ip netns exec "$cns" iperf3 -c "$server_ip" -P 4 -R -t "$secs" -J)
      c1=$(cpu)
      wait "$iperf3_server"
      mb=$(echo "$out" | json "d['end']['sum_received']['bits_per_second']/1e6")
      echo "$r,iperf3,$mb,$(awk -v a="$c0" -v b="$c1" 'BEGIN{print b-a}')," >> "$work/tput.csv"
    fi
  done
done

# Scaling: N download streams against iperf3 -P N -R, N from BENCH_STREAMS, each
# count in rounds that alternate which tool goes first (the machine drifts between
# minutes); CPU of the whole command for both, and bloatbench's data file for the
# streams' own time.
echo "streams,round,tool,mbits,cpu_seconds,file" > "$work/ladder.csv"
for n in ${BENCH_STREAMS:-1 2 4 8 16}; do
  for r in $(seq "$rounds"); do
    order="bloatbench iperf3"
    [ $((r % 2)) -eq 0 ] && order="iperf3 bloatbench"
    for tool in $order; do
      if [ "$tool" = bloatbench ]; then
        c0=$(cpu)
        mb=$(run "$work/ladder.log" -H "$inv" -l "$secs" -d 0 --te download_streams="$n" tcp_ndown | sum_row)
        c1=$(cpu)
        file=$(datafile "$work/ladder.log")
      else
        ip netns exec "$sns" iperf3 -s -1 >/dev/null 2>&1 &
        iperf3_server=$!
        sleep 0.5
        c0=$(cpu)
        out=$(ip netns exec "$cns" iperf3 -c "$server_ip" -P "$n" -R -t "$secs" -J)
        c1=$(cpu)
        wait "$iperf3_server"
        mb=$(echo "$out" | json "d['end']['sum_received']['bits_per_second']/1e6")
        file=""
      fi
      echo "$n,$r,$tool,$mb,$(awk -v a="$c0" -v b="$c1" 'BEGIN{print b-a}'),$file" >> "$work/ladder.csv"
    done
  done
done
touch "$work/cpu-trace.stop"
wait "$tracer"

# Sampling's cost: tcp_4down at a 4x shorter step against the default one, in
# pairs back to back, which first alternating, as the sojourn sampler's below;
# the row is the geometric mean of the pairs' ratios (paired() says why).
for r in $(seq "$pairs"); do
  order="fast default"
  [ $((r % 2)) -eq 0 ] && order="default fast"
  for o in $order; do
    if [ "$o" = fast ]; then
      mb=$(run "$work/fast.log" -H "$inv" -l "$pair_secs" -d 0 -s 0.05 tcp_4down | sum_row)
    else
      mb=$(run "$work/default.log" -H "$inv" -l "$pair_secs" -d 0 tcp_4down | sum_row)
    fi
    echo "$r,step-$o,$mb,," >> "$work/tput.csv"
  done
done

# The sojourn sampler's cost: runs in pairs, with and without it back to back,
# which comes first alternating, so that the machine's drift between rounds (an
# unshaped run's throughput moves by 10% or more from one minute to the next
# here) is not taken for the sampler's; the row is the geometric mean of the pairs'
# ratios. On a lab of its own, unshaped with a pfifo root: the unshaped lab's
# veths have no qdisc (noqueue), where the sampler loads no programs.
"$bb" testbed up --out "$queued" --queue pfifo:1000 >/dev/null
for r in $(seq "$pairs"); do
  order="with without"
  [ $((r % 2)) -eq 0 ] && order="without with"
  for o in $order; do
    if [ "$o" = with ]; then
      mb=$(run "$work/sojourn.log" -H "$queued" -l "$pair_secs" -d 0 tcp_4down | sum_row)
    else
      mb=$(run "$work/nosojourn.log" -H "$queued" -l "$pair_secs" -d 0 --no-sampler sojourn tcp_4down | sum_row)
    fi
    echo "$r,sojourn-$o,$mb,," >> "$work/tput.csv"
  done
done
"$bb" testbed down -H "$queued" >/dev/null

# Idle ping: both probe every 200 ms at the same time; the run is ping only, with a
# delay, and its wall time is the overhead's measure.
n=$(((secs + 4) * 5))
ip netns exec "$cns" fping -D -p 200 -c "$n" "$server_ip" > "$work/fping-idle.txt" 2>&1 &
t0=$(now)
run "$work/idle.log" -H "$inv" -l "$secs" -d 1 --te download_streams=0 tcp_ndown >/dev/null
t1=$(now)
wait || true # fping's status counts lost probes
idle_file=$(datafile "$work/idle.log")
ours_wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')
ours_nominal=$((secs + 2))
t0=$(now)
run "$work/idle0.log" -H "$inv" -l "$secs" -d 0 --te download_streams=0 tcp_ndown >/dev/null
t1=$(now)
ours_wall0=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')
flent_wall=""
if command -v flent >/dev/null; then
  # flent's ping test has a UDP ping too: irtt's when an irtt server answers, else
  # netperf's (not in Debian's main archive).
  irtt_pid=""
  if command -v irtt >/dev/null; then
    ip netns exec "$sns" irtt server -b "$server_ip" >/dev/null 2>&1 &
    irtt_pid=$!
    sleep 0.3
  fi
  t0=$(now)
  (cd "$work" && ip netns exec "$cns" flent ping -H "$server_ip" -l "$secs" -D "$work" >"$work/flent.log" 2>&1) || true
  t1=$(now)
  [ -n "$irtt_pid" ] && { kill "$irtt_pid"; wait "$irtt_pid" 2>/dev/null || true; }
  if ls "$work"/ping-*.flent.gz >/dev/null 2>&1; then
    flent_wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')
  else
    echo "flent ping wrote no data file; its output:" >&2
    cat "$work/flent.log" >&2
  fi
fi

# Probe loss at a 10 ms interval, idle, over the scale run's length: none may be
# lost. fping probes at the same interval alongside, as the reference.
m=$((scale_secs * 100))
ip netns exec "$cns" fping -D -p 10 -c "$m" "$server_ip" > "$work/fping-10ms.txt" 2>&1 &
run "$work/loss.log" -H "$inv" -l "$scale_secs" -d 0 -s 0.01 --te download_streams=0 tcp_ndown >/dev/null
wait || true
loss_file=$(datafile "$work/loss.log")

# Loaded ping, through a shaped lab: fping alongside from before the run to after it.
"$bb" testbed up --out "$shaped" --rate 100mbit --queue bfifo:300000 --gso off >/dev/null
slab=$(sed -n 's/^testbed: //p' "$shaped")
sserver_ip=$(ip -n "$slab-server" -4 -o addr show dev test0 | awk '{print $4}' | cut -d/ -f1)
n=$(((secs + 8) * 5))
ip netns exec "$slab-client" fping -D -p 200 -c "$n" "$sserver_ip" > "$work/fping-loaded.txt" 2>&1 &
run "$work/loaded.log" -H "$shaped" -l "$secs" -d 2 tcp_4down >/dev/null
wait || true
loaded_file=$(datafile "$work/loaded.log")
"$bb" testbed down -H "$shaped" >/dev/null

# Scale: 1024 streams, with every agent of this lab watched for its peak RSS. The
# watcher stops when a file appears, not on a signal: bash may run a trap late, or
# (seen once) not at all when the signal comes as it forks.
hwm="$work/hwm.txt"
(
  declare -A peak
  while [ ! -e "$work/stop-watch" ]; do
    for d in /proc/[0-9]*; do
      c=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) || continue
      case "$c" in *"/labs/$lab/"*" agent"*) ;; *) continue ;; esac
      case "$(cat "$d/comm" 2>/dev/null)" in agent-*) ;; *) continue ;; esac
      h=$(awk '/^VmHWM/{print $2}' "$d/status" 2>/dev/null) || continue
      [ -n "$h" ] && [ "${peak[${d#/proc/}]:-0}" -lt "$h" ] && peak[${d#/proc/}]=$h
    done
    sleep 0.5
  done 2>/dev/null
  for p in "${!peak[@]}"; do echo "$p ${peak[$p]}"; done > "$hwm"
) &
watcher=$!
/usr/bin/time -f "%M" -o "$work/controller-rss.txt" \
  "$bb" run -H "$inv" -l "$scale_secs" -d 1 -o "$work/res" --te download_streams=1024 tcp_ndown >/dev/null 2>"$work/scale.log"
touch "$work/stop-watch"
wait "$watcher" || true
scale_file=$(datafile "$work/scale.log")
"$bb" summary "$scale_file" > "$work/scale-summary.txt"
for i in 1 2 3; do
  t0=$(now); "$bb" summary "$scale_file" >/dev/null; t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}'
done > "$work/summary-times.txt"

machine="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs, Linux $(uname -r), congestion control $(sysctl -n net.ipv4.tcp_congestion_control), iperf3 $(iperf3 --version | head -1 | awk '{print $2}')"
python3 - "$work" "$secs" "$rounds" "$scale_secs" "$idle_file" "$loaded_file" "$scale_file" \
  "$ours_wall" "$ours_nominal" "$ours_wall0" "$flent_wall" "$loss_file" "$machine" "$pair_secs" <<'PY'
import csv, gzip, json, math, os, re, statistics, sys
work, secs, rounds, scale_secs = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
idle_file, loaded_file, scale_file = sys.argv[5:8]
ours_wall, ours_nominal, ours_wall0 = float(sys.argv[8]), float(sys.argv[9]), float(sys.argv[10])
flent_wall = float(sys.argv[11]) if sys.argv[11] else None
loss_file = sys.argv[12]
machine = sys.argv[13]
pair_secs = float(sys.argv[14])

rows = list(csv.DictReader(open(os.path.join(work, "tput.csv"))))
def med(tool, key):
    return statistics.median(float(r[key]) for r in rows if r["tool"] == tool)
bm, im = med("bloatbench", "mbits"), med("iperf3", "mbits")
def paired(a, b):
    # The medians of a's and b's runs; the geometric mean of their pairs' ratios a/b;
    # and that of first/second in a pair. The pairs alternate which goes first, as
    # many each way: here the first run of two back to back made more than the
    # second in 10 of 14 pairs of 5 s (4% on the geometric mean of six), and the
    # mean of the log ratios over both orders takes that out exactly, where their
    # median does not (a crossover design's period effect).
    pair, first = {}, {}
    for r in rows:
        if r["tool"] in (a, b):
            pair.setdefault(r["round"], {})[r["tool"]] = float(r["mbits"])
            first.setdefault(r["round"], r["tool"])
    full = {k: p for k, p in pair.items() if len(p) == 2}
    gm = lambda xs: math.exp(statistics.fmean(math.log(x) for x in xs))
    ratio = gm(p[a] / p[b] for p in full.values())
    order = gm(p[first[k]] / p[b if first[k] == a else a] for k, p in full.items())
    # The ratio's 95% interval, as a crossover design has it: the log ratios of
    # the a-first and the b-first pairs are two samples (each holds the period
    # effect once, with opposite signs), the estimate is half the sum of their
    # means, and its variance a quarter of the sum of theirs; Student's t with
    # n - 2 degrees of freedom (Cornish-Fisher's expansion of it: within 0.2% of
    # the table from 10 degrees on, 1.7% below it at 4).
    groups = [[math.log(p[a] / p[b]) for k, p in full.items() if first[k] == f] for f in (a, b)]
    lo = hi = float("nan")
    if all(len(g) >= 2 for g in groups):
        var = sum(statistics.variance(g) / len(g) for g in groups) / 4
        df, z = len(full) - 2, 1.959964
        t = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        lo, hi = ratio * math.exp(-t * math.sqrt(var)), ratio * math.exp(t * math.sqrt(var))
    return med(a, "mbits"), med(b, "mbits"), ratio, len(full), order, lo, hi
fm, dm, fratio, fpairs, forder, flo, fhi = paired("step-fast", "step-default")
sw, sn, sratio, spairs, sorder, slo, shi = paired("sojourn-with", "sojourn-without")
bc, ic = med("bloatbench", "cpu_seconds"), med("iperf3", "cpu_seconds")
# Throughput per busy CPU second: the tools' efficiency when the CPU is the limit.
be, ie = bm * secs / bc, im * secs / ic

# The CPU of the streams' own time, from the trace: t0 + delay to t0 + delay +
# length of each of our runs (the bench runs -d 0; set-up, the agents' start and the
# end left out), interpolated between the trace's samples. iperf3's whole command is
# counted: its connect and its JSON end are small, but they are in its number and
# not in ours, which leans this ratio a little our way.
trace = [tuple(map(float, l.split())) for l in open(os.path.join(work, "cpu-trace.txt")) if l.strip()]
def busy_at(t):
    for (ta, ba), (tb, bb_) in zip(trace, trace[1:]):
        if ta <= t <= tb:
            return ba + (bb_ - ba) * (t - ta) / (tb - ta) if tb > ta else ba
    raise SystemExit(f"the CPU trace does not cover {t}")
stream_cpu = []
for r in rows:
    if r["tool"] == "bloatbench":
        head = None
        for line in gzip.open(r["file"], "rt"):
            head = json.loads(line)["metadata"]
            break
        a = head["t0"] + head["delay"]
        stream_cpu.append(busy_at(a + head["length"]) - busy_at(a))
bs = statistics.median(stream_cpu)
bse = bm * secs / bs

def run_of(path):
    """header and ping samples of a data file"""
    head, ping = None, []
    for line in gzip.open(path, "rt"):
        r = json.loads(line)
        if r["type"] == "header":
            head = r["metadata"]
        elif r["type"] == "samples" and r["name"].startswith("Ping (ms) ICMP"):
            ping += [(s["t"], s["v"]) for s in r["samples"] if not s.get("lost")]
    return head, ping

def fping_of(path):
    v = []
    for m in re.finditer(r"^\[(\d+\.\d+)\] .*?\[\d+\], \d+ bytes, ([0-9.]+) ms", open(path).read(), re.M):
        v.append((float(m.group(1)), float(m.group(2))))
    return v

# idle: every reply of each, both over the same span
_, ping = run_of(idle_file)
ours_idle = statistics.median(v for _, v in ping)
fping_idle = statistics.median(v for _, v in fping_of(os.path.join(work, "fping-idle.txt")))
# loaded: the streams' time, past its first second (slow start), for both
head, ping = run_of(loaded_file)
a = head["t0"] + head["delay"] + 1
b = head["t0"] + head["delay"] + head["length"]
ours_loaded = [v for t, v in ping if a <= t <= b]
fping_loaded = [v for t, v in fping_of(os.path.join(work, "fping-loaded.txt")) if a <= t <= b]

def probes_of(path):
    """probes sent and lost by a data file's ping series"""
    sent = lost = 0
    for line in gzip.open(path, "rt"):
        r = json.loads(line)
        if r["type"] == "samples" and r["name"].startswith("Ping (ms) ICMP"):
            sent += len(r["samples"])
            lost += sum(1 for s in r["samples"] if s.get("lost"))
    return sent, lost

ours_sent, ours_lost = probes_of(loss_file)
m = re.search(r"xmt/rcv/%loss = (\d+)/(\d+)/", open(os.path.join(work, "fping-10ms.txt")).read())
fping_sent, fping_lost = (int(m.group(1)), int(m.group(1)) - int(m.group(2))) if m else (0, 0)

rss_controller = int(open(os.path.join(work, "controller-rss.txt")).read().split()[-1]) / 1024
agents = [int(l.split()[1]) / 1024 for l in open(os.path.join(work, "hwm.txt")) if l.strip()]
size = os.path.getsize(scale_file) / 1e6
sum_time = statistics.median(float(x) for x in open(os.path.join(work, "summary-times.txt")))
summary = open(os.path.join(work, "scale-summary.txt")).read()
streams = len(re.findall(r"^ TCP download::\d+ ", summary, re.M))
missing = re.findall(r"Warning: (.*?) has \d+ of its \d+ grid points", summary)
more = re.search(r"Warning: and (\d+) more series miss", summary)
n_missing = len(missing) + (int(more.group(1)) if more else 0)

print(f"Machine: {machine}\n")
print(f"bloatbench vs reference tools, local lab, {secs:g} s per run, median of {rounds} rounds; scale run {scale_secs} s\n")
print("| measure | bloatbench | reference | ratio (bloatbench / reference) |")
print("|---|---:|---:|---:|")
print(f"| TCP 4 streams down, Mbit/s (iperf3 -P 4 -R) | {bm:.0f} | {im:.0f} | {bm/im:.2f} |")
print(f"| CPU busy during the run, core-seconds | {bc:.1f} | {ic:.1f} | {bc/ic:.2f} |")
print(f"| Mbit per CPU core-second | {be:.0f} | {ie:.0f} | {be/ie:.2f} |")
print(f"| CPU busy in the streams' time (t0 + delay to + length; iperf3: its whole run), core-seconds | {bs:.1f} | {ic:.1f} | {bs/ic:.2f} |")
print(f"| Mbit per CPU core-second of the streams' time | {bse:.0f} | {ie:.0f} | {bse/ie:.2f} |")
print(f"| TCP 4 streams down at -s 0.05 (4x the samples), Mbit/s (vs -s 0.2; {fpairs} pairs of {pair_secs:g} s back to back, which first alternating, the ratio the geometric mean of theirs, 95% interval {flo:.3f}-{fhi:.3f}; a pair's first run made {forder:.3f}x its second) | {fm:.0f} | {dm:.0f} | {fratio:.3f} |")
print(f"| TCP 4 streams down with the sojourn sampler (BPF on every enqueue, dequeue and hand-off to a driver; a pfifo root on the unshaped lab), Mbit/s (vs --no-sampler sojourn; {spairs} pairs of {pair_secs:g} s back to back, as above, 95% interval {slo:.3f}-{shi:.3f}; first/second {sorder:.3f}x) | {sw:.0f} | {sn:.0f} | {sratio:.3f} |")
print(f"| idle ICMP RTT median, ms (fping -p 200 alongside) | {ours_idle:.3f} | {fping_idle:.3f} | {ours_idle/fping_idle:.2f} |")
if ours_loaded and fping_loaded:
    ol, fl = statistics.median(ours_loaded), statistics.median(fping_loaded)
    print(f"| loaded ICMP RTT median, ms (htb 100mbit, bfifo 300000; fping alongside) | {ol:.2f} | {fl:.2f} | {ol/fl:.2f} |")
    om, fx = max(ours_loaded), max(fping_loaded)
    print(f"| loaded ICMP RTT max, ms (bound: 24 ms of queue + idle RTT) | {om:.2f} | {fx:.2f} | {om/fx:.2f} |")
print(f"| idle ICMP at a 10 ms interval over {scale_secs} s: probes lost of sent (fping -p 10 alongside) | {ours_lost} of {ours_sent} | {fping_lost} of {fping_sent} | |")
print(f"| wall time of a {secs:g} s run with 1 s delay, s (vs length + 2 x delay) | {ours_wall:.2f} | {ours_nominal:.0f} | {ours_wall/ours_nominal:.2f} |")
print(f"| its overhead beyond length + 2 x delay, s (limit 0.5) | {ours_wall-ours_nominal:.2f} | 0.5 | {(ours_wall-ours_nominal)/0.5:.2f} |")
if flent_wall:
    print(f"| wall time of a {secs:g} s ping-only run, s (flent ping -l {secs:g}) | {ours_wall0:.2f} | {flent_wall:.2f} | {ours_wall0/flent_wall:.2f} |")
print(f"| 1024 streams: controller peak RSS, MB (limit 256) | {rss_controller:.0f} | 256 | {rss_controller/256:.2f} |")
for i, a in enumerate(sorted(agents, reverse=True)):
    print(f"| 1024 streams: agent {i+1} peak RSS, MB (limit 512) | {a:.0f} | 512 | {a/512:.2f} |")
print(f"| 1024 streams: data file, MB (limit 20) | {size:.1f} | 20 | {size/20:.2f} |")
print(f"| 1024 streams: `summary` of the file, s (limit 1) | {sum_time:.2f} | 1 | {sum_time:.2f} |")
print(f"| 1024 streams: streams in the summary; series missing > 5% of their grid | {streams}; {n_missing} | 1024; 0 | |")

# The scaling table: medians over the rounds of each stream count.
ladder = list(csv.DictReader(open(os.path.join(work, "ladder.csv"))))
if ladder:
    print(f"\nMachine: {machine}\n")
    print(f"Scaling: N TCP download streams, bloatbench tcp_ndown against iperf3 -P N -R, local lab, {secs:g} s per run, median of {rounds} rounds alternating which tool goes first\n")
    print("| streams | bloatbench Mbit/s | iperf3 Mbit/s | ratio | bloatbench Mbit per core-second (whole run; streams' time) | iperf3 Mbit per core-second | ratio (whole run; streams' time) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in sorted({int(r["streams"]) for r in ladder}):
        rs = [r for r in ladder if int(r["streams"]) == n]
        def m(tool, f):
            return statistics.median(f(r) for r in rs if r["tool"] == tool)
        bmb, imb = m("bloatbench", lambda r: float(r["mbits"])), m("iperf3", lambda r: float(r["mbits"]))
        bce = m("bloatbench", lambda r: float(r["mbits"]) * secs / float(r["cpu_seconds"]))
        ice = m("iperf3", lambda r: float(r["mbits"]) * secs / float(r["cpu_seconds"]))
        def stream_eff(r):
            head = None
            for line in gzip.open(r["file"], "rt"):
                head = json.loads(line)["metadata"]
                break
            a = head["t0"] + head["delay"]
            return float(r["mbits"]) * secs / (busy_at(a + head["length"]) - busy_at(a))
        bse_n = m("bloatbench", stream_eff)
        print(f"| {n} | {bmb:.0f} | {imb:.0f} | {bmb/imb:.2f} | {bce:.0f}; {bse_n:.0f} | {ice:.0f} | {bce/ice:.2f}; {bse_n/ice:.2f} |")
PY
# The peers' table: a lab of its own, after this script's labs are down.
cleanup
trap - EXIT
bash bench/peers.sh "${BENCH_PEER_SECONDS:-30}" "${BENCH_PEER_PAIRS:-3}"
