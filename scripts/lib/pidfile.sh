# The part scripts/activemq.sh and scripts/mongo-wire.sh share: stop and status of a
# background server whose pid is kept in a file in its own folder, and the command line
# (run_command). Sourced, not run.
#
# The sourcing script sets
#   PIDFILE       the pid file's name inside the folder (broker.pid, server.pid)
#   SERVER        what the messages call the process (broker, server)
#   STOP_SECONDS  how long stop waits after SIGTERM before SIGKILL
# and defines
#   pid_marker DIR     text the command line of DIR's process holds
#   running_where DIR  what status says after "running: pid PID, "
#   usage, cmd_install, cmd_start (and cmd_restart, if not stop + start)

running_pid() {
  # prints the pid and succeeds if DIR's process is alive
  local dir=$1 pid
  pid=$(cat "$dir/$PIDFILE" 2>/dev/null) || return 1
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  # guard against a recycled pid: it must be the process started on DIR
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$(pid_marker "$dir") " || return 1
  echo "$pid"
}

cmd_stop() {
  local dir pid i
  [[ $# -ge 1 ]] || usage
  [[ -d "$1" ]] || { echo "not running (no $1)"; return 0; }
  dir=$(cd "$1" && pwd)
  if ! pid=$(running_pid "$dir"); then
    rm -f "$dir/$PIDFILE"
    echo "not running ($dir)"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 $((STOP_SECONDS * 10))); do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$dir/$PIDFILE"
      echo "stopped after ~$((i / 10)).$((i % 10)) s"
      return 0
    fi
    sleep 0.1
  done
  echo "$SERVER pid $pid did not stop within $STOP_SECONDS s: SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$dir/$PIDFILE"
}

cmd_status() {
  local dir pid
  [[ $# -ge 1 ]] || usage
  [[ -d "$1" ]] || { echo "not running (no $1)"; return 3; }
  dir=$(cd "$1" && pwd)
  if pid=$(running_pid "$dir"); then
    echo "running: pid $pid, $(running_where "$dir")"
    return 0
  fi
  echo "not running ($dir)"
  return 3
}

run_command() {
  # the scripts' command line: SUBCOMMAND [DIR]
  [[ $# -ge 1 ]] || usage
  local sub=$1
  shift
  case "$sub" in
    install) cmd_install ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    # a script whose restart differs from stop + start defines cmd_restart
    restart) if declare -F cmd_restart >/dev/null; then cmd_restart "$@"; else cmd_stop "$@" && cmd_start "$@"; fi ;;
    status) cmd_status "$@" ;;
    *) usage ;;
  esac
}
