# The facts script the controller ran through sh on every host until the agent
# read its facts itself (package hostfacts): the reference its reading is
# checked against on this machine. $@ are the bottleneck devices.
echo "kernel.release=$(uname -r)"
echo "kernel.cmdline=$(cat /proc/cmdline 2>/dev/null)"
echo "cpu.count=$(grep -c ^processor /proc/cpuinfo)"
echo "cpu.model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
grep -s -r -H . /proc/sys/net/ipv4/ 2>/dev/null | grep '^/proc/sys/net/ipv4/tcp_'
grep -s -r -H . /proc/sys/net/core/ 2>/dev/null
for m in /sys/module/sch_*; do
  [ -d "$m" ] || continue
  v=$(cat "$m/version" 2>/dev/null || cat "$m/srcversion" 2>/dev/null || echo built-in)
  echo "module.${m##*/}=$v"
done
for d in "$@"; do
  ethtool -i "$d" 2>/dev/null | sed -n -e "s/^driver: /dev.$d.driver=/p" -e "s/^firmware-version: /dev.$d.firmware=/p" -e "s/^version: /dev.$d.driver_version=/p"
  ethtool -k "$d" 2>/dev/null | sed -n -e "s/^\(tcp-segmentation-offload\|generic-segmentation-offload\|generic-receive-offload\|large-receive-offload\): /dev.$d.offload.\1=/p"
  ethtool -l "$d" 2>/dev/null | sed -n '/^Current hardware settings/,$p' | sed -n -e "s/^\(RX\|TX\|Combined\):[[:space:]]*/dev.$d.channels.\1=/p"
  for q in /sys/class/net/"$d"/queues/tx-*; do
    [ -d "$q/byte_queue_limits" ] || continue
    echo "dev.$d.bql.${q##*/}.limit_max=$(cat "$q/byte_queue_limits/limit_max")"
    echo "dev.$d.bql.${q##*/}.limit_min=$(cat "$q/byte_queue_limits/limit_min")"
  done
  echo "dev.$d.qdiscs=$(tc qdisc show dev "$d" 2>/dev/null | tr '\n' ';')"
  echo "dev.$d.classes=$(tc class show dev "$d" 2>/dev/null | tr '\n' ';')"
  echo "dev.$d.speed=$(cat /sys/class/net/"$d"/speed 2>/dev/null)"
done
