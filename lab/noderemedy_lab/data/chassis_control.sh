#!/bin/sh
# ipmi_sim chassis_control hook of the noderemedy lab (one node directory per BMC).
#
# ipmi_sim (OpenIPMI 2.0.33) runs it through sh, waiting for it:
#   chassis_control.sh NODE_DIR get power [boot]     -> prints "power:<0|1>" ("boot:default")
#   chassis_control.sh NODE_DIR set power 0|1        -> power off / on; "chassis power cycle" is
#                                                       "set power 0" then, about 1 s later, "set power 1"
#   chassis_control.sh NODE_DIR set reset 1          -> "chassis power reset": power stays as it is
#   chassis_control.sh NODE_DIR set shutdown 1       -> "chassis power soft": treated as power off
#   chassis_control.sh NODE_DIR set boot X | identify I F
#   chassis_control.sh NODE_DIR check                -> exit 1 (as in the lab reference)
# NODE_DIR holds:
#   power        1 (on) or 0 (off)
#   power.log    one line per power set: "<epoch seconds> <0|1>" ("<epoch seconds> <0|1> ignored"
#                for a set answered as done under ignore_power)
#   events.log   reset / boot / identify requests, and power-hook failures
#   power_hook   optional executable, run as "power_hook 0|1" after the state is recorded; its
#                output goes to events.log; a failure is logged and never changes the BMC's answer
#   ignore_power optional file: while it exists every power set is answered as done but changes
#                nothing ("<epoch seconds> power <0|1> ignored" in events.log, "<epoch seconds>
#                <0|1> ignored" in power.log): a BMC that says yes and leaves the machine as it is
dir="$1"; shift
op="$1"; shift
state="$dir/power"
[ -f "$state" ] || echo 1 > "$state"

set_power() {
    if [ -e "$dir/ignore_power" ]; then
        now="$(date +%s.%N)"
        echo "$now power $1 ignored" >> "$dir/events.log"
        echo "$now $1 ignored" >> "$dir/power.log"
        return 0
    fi
    echo "$1" > "$state.tmp" && mv -f "$state.tmp" "$state"
    echo "$(date +%s.%N) $1" >> "$dir/power.log"
    if [ -x "$dir/power_hook" ]; then
        if ! "$dir/power_hook" "$1" >> "$dir/events.log" 2>&1; then
            echo "$(date +%s.%N) power_hook $1 failed" >> "$dir/events.log"
        fi
    fi
}

case "$op" in
  get)
    for p in "$@"; do
      case "$p" in
        power) echo "power:$(cat "$state")" ;;
        boot)  echo "boot:default" ;;
        *) echo "Invalid parameter: $p"; exit 1 ;;
      esac
    done ;;
  set)
    while [ $# -gt 0 ]; do
      p="$1"; v="$2"; shift 2
      case "$p" in
        power) case "$v" in 0|1) set_power "$v" ;; *) echo "Invalid value: $v"; exit 1 ;; esac ;;
        shutdown) set_power 0 ;;
        reset|boot) echo "$(date +%s.%N) $p $v" >> "$dir/events.log" ;;
        identify) echo "$(date +%s.%N) identify $v $*" >> "$dir/events.log"; break ;;
        *) echo "Invalid parameter: $p"; exit 1 ;;
      esac
    done ;;
  check) exit 1 ;;
  *) echo "Unknown operation: $op"; exit 1 ;;
esac
exit 0
