#!/bin/sh
# Records what real tc and ethtool print for the fake bottleneck of the controller's
# tests (faketc_test.go): a veth with two tx queues in a scratch network namespace,
# put through every state the tests' setups and restores pass through, and the
# failures they meet. Needs root, iproute2, ethtool and setpriv; the namespace is
# deleted at the end. Run from this directory: sh record.sh
#
# states/NAME/commands are the tc commands (without "tc") that make the state from
# the device's default, one a line; stderr what the last one printed; the other
# files what the show commands print in that state. failures/NAME/ are a command
# that fails in a state (state names it), with its stderr and exit status, run as
# root or as nobody (as): the fake fails the first kind whenever it is run in that
# state, the second only where a test makes it fail.
set -eu
ns=bbrec$$
dev=bbfake0
ip netns add "$ns"
trap 'ip netns del "$ns"' EXIT
ip -n "$ns" link add "$dev" numtxqueues 2 numrxqueues 2 type veth peer name bbpeer0
ip -n "$ns" link set "$dev" up
ip -n "$ns" link set bbpeer0 up
run() { ip netns exec "$ns" "$@"; }

rm -rf states failures
mkdir states failures
run ethtool -k "$dev" >ethtool-k.txt
run ethtool -l "$dev" >ethtool-l.txt
cp /proc/net/psched psched

reset() { run tc qdisc del dev "$dev" root 2>/dev/null || true; }

# state NAME CMD...: each CMD one tc command line.
state() {
	name=$1
	shift
	reset
	d=states/$name
	mkdir "$d"
	: >"$d/commands"
	: >"$d/stderr"
	for c in "$@"; do
		# shellcheck disable=SC2086 # the words of the command
		run tc $c 2>"$d/stderr"
		echo "$c" >>"$d/commands"
	done
	run tc -j qdisc show dev "$dev" >"$d/qdisc.json"
	run tc -s -j qdisc show dev "$dev" >"$d/qdisc-s.json"
	run tc qdisc show dev "$dev" >"$d/qdisc.txt"
	run tc class show dev "$dev" >"$d/class.txt"
	run tc -d -raw class show dev "$dev" >"$d/class-d.txt"
	# The fake prints no filters: no state may have any.
	for id in $(awk '{print $3}' "$d/qdisc.txt") $(awk '$2 == "htb" {print $3}' "$d/class.txt"); do
		[ "$id" = 0: ] && continue
		if [ -n "$(run tc filter show dev "$dev" parent "$id")" ]; then
			echo "state $name has filters on $id" >&2
			exit 1
		fi
	done
}

# failure NAME STATE AS CMD: CMD fails in STATE, run as AS (root or nobody).
failure() {
	name=$1 st=$2 as=$3 c=$4
	reset
	while read -r sc; do
		# shellcheck disable=SC2086
		run tc $sc 2>/dev/null
	done <"states/$st/commands"
	d=failures/$name
	mkdir "$d"
	echo "$st" >"$d/state"
	echo "$as" >"$d/as"
	echo "$c" >"$d/command"
	rc=0
	if [ "$as" = nobody ]; then
		# shellcheck disable=SC2086
		run setpriv --reuid=65534 --regid=65534 --clear-groups tc $c 2>"$d/stderr" || rc=$?
	else
		# shellcheck disable=SC2086
		run tc $c 2>"$d/stderr" || rc=$?
	fi
	if [ "$rc" = 0 ]; then
		echo "failure $name: tc $c succeeded" >&2
		exit 1
	fi
	echo "$rc" >"$d/exit"
}

htb="qdisc replace dev $dev root handle 1: htb default 1"
class="class replace dev $dev parent 1: classid 1:1 htb rate 100mbit ceil 100mbit"
# the local lab's tree (qdisc.ShapedOps with a bfifo leaf)
labLeaf="qdisc replace dev $dev parent 1:1 handle 10: bfifo limit 300000"
# what restore puts back of it (qdisc.State.RestoreOps)
rHTB="qdisc add dev $dev root handle 1: htb default 1 r2q 10 direct_qlen 1000"
rClass="class add dev $dev parent 1: classid 1:1 htb rate 100Mbit ceil 100Mbit burst 1600b cburst 1600b prio 0 quantum 200000"

state default
state bfifo "qdisc replace dev $dev root handle 1: bfifo limit 100000"
state htb "$htb"
state htb-class "$htb" "$class"
state htb-pfifo "$htb" "$class" "qdisc replace dev $dev parent 1:1 handle 10: pfifo limit 1000"
state lab "$htb" "$class" "$labLeaf"
state mq "qdisc replace dev $dev root handle 1: mq"
state mq-bfifo1 "qdisc replace dev $dev root handle 1: mq" "qdisc replace dev $dev parent 1:1 bfifo limit 100000"
state mq-bfifo "qdisc replace dev $dev root handle 1: mq" "qdisc replace dev $dev parent 1:1 bfifo limit 100000" "qdisc replace dev $dev parent 1:2 bfifo limit 100000"
state lab-restored1 "$rHTB"
state lab-restored2 "$rHTB" "$rClass"
state lab-restored "$rHTB" "$rClass" "$labLeaf"
# what restore puts back of state bfifo, once a newer run's setup is taken off
state bfifo-restored "qdisc add dev $dev root handle 1: bfifo limit 100000"

# This kernel has no fq_codel (nor cake, fq, pie, dualpi2, netem): a setup of it
# fails as it would on any such kernel.
failure no-fq_codel default root "qdisc replace dev $dev root handle 1: fq_codel"
failure del-default default root "qdisc del dev $dev root"
# A user without CAP_NET_ADMIN: the words a failing restore gets.
failure not-permitted bfifo nobody "qdisc del dev $dev root"
