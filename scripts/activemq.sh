#!/usr/bin/env bash
# Tepat's ActiveMQ Classic broker lifecycle (Debian's `activemq` package, 5.17, Java 17).
#
#   scripts/activemq.sh install          apt-get install activemq, libxstream-java, libjettison-java if missing
#   scripts/activemq.sh start   BASE     create BASE, copy deploy/activemq/conf, start, wait for STOMP
#   scripts/activemq.sh stop    BASE     SIGTERM (clean shutdown), SIGKILL after 30 s
#   scripts/activemq.sh restart BASE
#   scripts/activemq.sh status  BASE
#
# Environment:
#   ACTIVEMQ_HOME          an ActiveMQ Classic 5.17+ installation (default /usr/share/activemq, Debian's);
#                          set, `install` only checks it and `start` runs its bin/activemq.jar
#   AMQ_CONF_SRC           folder copied to BASE/conf (default deploy/activemq/conf)
#   AMQ_HEAP               max heap (default 256m; docs/ACTIVEMQ.md: 1g for large scheduler backlogs)
#   TEPAT_AMQ_BIND         address the connectors listen on (default 127.0.0.1)
#   TEPAT_AMQ_STOMP_PORT   STOMP port (default 61613)
#   TEPAT_AMQ_OPENWIRE_PORT OpenWire port (default 61616)
#
# The jar is started directly, not through /usr/bin/activemq: that wrapper forces
# -Xmx512M, switches to the activemq user and its `stop` is broken.
# BASE/conf is refreshed from deploy/activemq/conf on every start; data stays in BASE/data.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CONF_SRC=${AMQ_CONF_SRC:-"$HERE/../deploy/activemq/conf"}
DEBIAN_HOME=/usr/share/activemq
AMQ_HOME=${ACTIVEMQ_HOME:-$DEBIAN_HOME}
AMQ_JAR="$AMQ_HOME/bin/activemq.jar"
# The statistics plugin's map transformation needs xstream and jettison. Debian's
# activemq only Recommends them, so an install without recommends leaves them out
# and the broker drops the client with NoClassDefFoundError: install them by name.
DEBIAN_PACKAGES=(activemq libxstream-java libjettison-java)
EXTRA_JARS=(xstream jettison)
BIND=${TEPAT_AMQ_BIND:-127.0.0.1}
STOMP_PORT=${TEPAT_AMQ_STOMP_PORT:-61613}
OPENWIRE_PORT=${TEPAT_AMQ_OPENWIRE_PORT:-61616}
HEAP=${AMQ_HEAP:-256m}

die() { echo "activemq.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

probe_host() {
  # 0.0.0.0 listens everywhere; probe it through loopback
  if [[ "$BIND" == "0.0.0.0" ]]; then echo 127.0.0.1; else echo "$BIND"; fi
}

stomp_up() {
  (exec 3<>"/dev/tcp/$(probe_host)/$STOMP_PORT") 2>/dev/null
}

PIDFILE=broker.pid
SERVER=broker
STOP_SECONDS=30
pid_marker() { echo "-Dactivemq.base=$1"; }
running_where() { echo "base $1"; }
# shellcheck source=scripts/lib/pidfile.sh
source "$HERE/lib/pidfile.sh"

log_tail() {
  local base=$1
  echo "---- $base/data/console.out (tail) ----" >&2
  tail -n 40 "$base/data/console.out" >&2 2>/dev/null || true
  if [[ -f "$base/data/activemq.log" ]]; then
    echo "---- $base/data/activemq.log (tail) ----" >&2
    tail -n 20 "$base/data/activemq.log" >&2 || true
  fi
}

missing_jars() {
  # prints the jars the broker needs that are missing, one a line
  local jar
  [[ -f "$AMQ_JAR" ]] || echo "$AMQ_JAR"
  for jar in "${EXTRA_JARS[@]}"; do
    extra_jar "$jar" >/dev/null || echo "$jar.jar"
  done
}

extra_jar() {
  # where xstream or jettison is: the distribution's lib/optional (upstream tarball),
  # else Debian's /usr/share/java
  local name=$1 found
  found=$(compgen -G "$AMQ_HOME/lib/optional/$name-[0-9]*.jar" | head -n 1) || true
  [[ -n "$found" ]] || found=/usr/share/java/$name.jar
  [[ -f "$found" ]] || return 1
  echo "$found"
}

cmd_install() {
  local missing
  missing=$(missing_jars)
  if [[ -z "$missing" ]]; then
    echo "activemq already installed ($AMQ_JAR)"
    return 0
  fi
  if [[ "$AMQ_HOME" != "$DEBIAN_HOME" ]]; then
    die "ACTIVEMQ_HOME=$AMQ_HOME lacks: $(echo $missing) (unset ACTIVEMQ_HOME to use Debian's activemq)"
  fi
  command -v apt-get >/dev/null ||
    die "apt-get not found; install ActiveMQ Classic 5.17+ and set ACTIVEMQ_HOME to it"
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "${DEBIAN_PACKAGES[@]}"
  missing=$(missing_jars)
  [[ -z "$missing" ]] || die "apt-get install ${DEBIAN_PACKAGES[*]} finished but these are missing: $(echo $missing)"
  echo "activemq installed"
}

prepare_base() {
  local base=$1 jar path
  mkdir -p "$base/conf" "$base/data" "$base/tmp" "$base/lib"
  [[ -d "$CONF_SRC" ]] || die "config source $CONF_SRC missing"
  cp -f "$CONF_SRC"/* "$base/conf/"
  # xstream and jettison (see EXTRA_JARS) go on the classpath through BASE/lib
  for jar in "${EXTRA_JARS[@]}"; do
    path=$(extra_jar "$jar") || die "$jar.jar missing (run: $0 install)"
    ln -sfn "$path" "$base/lib/$jar.jar"
  done
}

cmd_start() {
  local base pid i
  [[ $# -ge 1 ]] || usage
  [[ -f "$AMQ_JAR" ]] || die "$AMQ_JAR missing: run '$0 install' first"
  mkdir -p "$1"
  base=$(cd "$1" && pwd)
  if pid=$(running_pid "$base"); then
    echo "already running: pid $pid, base $base, stomp $(probe_host):$STOMP_PORT"
    return 0
  fi
  if stomp_up; then
    die "port $STOMP_PORT on $(probe_host) is already taken by another process (not the broker at $base)"
  fi
  prepare_base "$base"
  # $BASE/lib comes first on activemq.classpath, so the symlinked jars are found
  nohup java -Xms64m -Xmx"$HEAP" -Djava.awt.headless=true -Djava.io.tmpdir="$base/tmp" \
    --add-reads=java.xml=java.logging \
    --add-opens java.base/java.security=ALL-UNNAMED --add-opens java.base/java.net=ALL-UNNAMED \
    --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED \
    --add-opens java.naming/javax.naming.spi=ALL-UNNAMED --add-opens java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED \
    --add-opens java.base/java.util.concurrent=ALL-UNNAMED --add-opens java.base/java.util.concurrent.atomic=ALL-UNNAMED \
    -Dactivemq.classpath="$base/conf" -Dactivemq.home="$AMQ_HOME" \
    -Dactivemq.base="$base" -Dactivemq.conf="$base/conf" -Dactivemq.data="$base/data" \
    -Dactivemq.bind="$BIND" -Dactivemq.stomp.port="$STOMP_PORT" -Dactivemq.openwire.port="$OPENWIRE_PORT" \
    -jar "$AMQ_JAR" start "xbean:file:$base/conf/activemq.xml" \
    > "$base/data/console.out" 2>&1 < /dev/null &
  pid=$!
  echo "$pid" > "$base/broker.pid"
  for i in $(seq 1 600); do
    if stomp_up; then
      echo "started: pid $pid, base $base, stomp $(probe_host):$STOMP_PORT up after ~$((i / 10)).$((i % 10)) s"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$base/broker.pid"
      log_tail "$base"
      die "broker at $base died during start"
    fi
    sleep 0.1
  done
  log_tail "$base"
  kill -TERM "$pid" 2>/dev/null || true
  rm -f "$base/broker.pid"
  die "timeout: STOMP port $STOMP_PORT not up within 60 s (broker stopped)"
}

run_command "$@"
