#!/usr/bin/env bash
# Entrypoint of the activemq service in docker-compose.yml (apache/activemq-classic image).
#
# It replaces the image's entrypoint, whose handling of console credentials differs
# between image versions, and does three things before `activemq console`:
#   - writes the web console's only account from ACTIVEMQ_CONSOLE_USER and
#     ACTIVEMQ_CONSOLE_PASSWORD (required) into the file the image's jetty.xml reads:
#     conf/jetty-realm.properties on 5.x, conf/users.properties + groups.properties
#     (JAAS) on 6.x; it stops if jetty.xml uses neither, rather than keep admin/admin;
#   - writes the broker's only client account from ACTIVEMQ_BROKER_USER and
#     ACTIVEMQ_BROKER_PASSWORD (required) into conf/tepat-broker-credentials.properties,
#     which the broker config reads: anonymous STOMP and OpenWire clients are refused;
#   - builds ACTIVEMQ_OPTS as the distribution's defaults, then ACTIVEMQ_OPTS as given
#     (extra JVM flags), then the heap (ACTIVEMQ_HEAP, default 1g) and the bindings a
#     container needs (-Dactivemq.bind=0.0.0.0 for STOMP and OpenWire, -Djetty.host=0.0.0.0
#     for the console): the last of a repeated flag wins, so setting ACTIVEMQ_OPTS cannot
#     drop the bindings (with the image's own entrypoint it silently does);
#   - leaves the broker config to the mounted conf/activemq.xml.
# ACTIVEMQ_HOME (the image sets /opt/apache-activemq) and ACTIVEMQ_CONSOLE_EXEC (default:
# bin/activemq) exist so that tests/deploy/test_activemq_entrypoint.py can run it.
set -euo pipefail

die() { echo "activemq-entrypoint: $*" >&2; exit 1; }

home=${ACTIVEMQ_HOME:-/opt/apache-activemq}
conf=${ACTIVEMQ_CONF:-$home/conf}
user=${ACTIVEMQ_CONSOLE_USER:-admin}
password=${ACTIVEMQ_CONSOLE_PASSWORD:-}
heap=${ACTIVEMQ_HEAP:-1g}
broker_user=${ACTIVEMQ_BROKER_USER:-tepat}
broker_password=${ACTIVEMQ_BROKER_PASSWORD:-}

[[ -n "$password" ]] || die "ACTIVEMQ_CONSOLE_PASSWORD is not set"
[[ -n "$broker_password" ]] || die "ACTIVEMQ_BROKER_PASSWORD is not set"
# it goes into a properties file and into the clients' stomp:// URL
[[ "$broker_user" =~ ^[A-Za-z0-9._-]+$ ]] || die "ACTIVEMQ_BROKER_USER: letters, digits, '.', '_' or '-' only"
[[ "$broker_password" =~ ^[A-Za-z0-9._~-]+$ ]] || die "ACTIVEMQ_BROKER_PASSWORD: letters, digits, '.', '_', '~' or '-' only"
# the realm files are "user: password, role" and "user=password" lines
[[ "$user" =~ ^[A-Za-z0-9._-]+$ ]] || die "ACTIVEMQ_CONSOLE_USER: letters, digits, '.', '_' or '-' only"
[[ "$password" != *[[:space:],:=\\]* ]] || die "ACTIVEMQ_CONSOLE_PASSWORD: no spaces, ',', ':', '=' or '\\'"
[[ "$heap" =~ ^[0-9]+[kKmMgG]?$ ]] || die "ACTIVEMQ_HEAP: a JVM size such as 512m or 2g"
[[ -f "$conf/jetty.xml" ]] || die "$conf/jetty.xml missing: is this an ActiveMQ Classic image?"

write_private() {
  # replace $1 with the text $2, readable by the owner only (mktemp makes it 0600)
  local tmp
  tmp=$(mktemp "$1.XXXXXX")
  printf '%s\n' "$2" > "$tmp"
  mv -f "$tmp" "$1"
}

if grep -q "jetty-realm.properties" "$conf/jetty.xml"; then
  write_private "$conf/jetty-realm.properties" "$user: $password, admin"
elif grep -q "JAASLoginService" "$conf/jetty.xml"; then
  write_private "$conf/users.properties" "$user=$password"
  write_private "$conf/groups.properties" "admins=$user"
else
  die "$conf/jetty.xml reads neither jetty-realm.properties nor JAAS: cannot set the console password"
fi

write_private "$conf/tepat-broker-credentials.properties" "activemq.anonymous=false
activemq.user=$broker_user
activemq.password=$broker_password"

base_opts="-Djava.util.logging.config.file=logging.properties -Djava.security.auth.login.config=$conf/login.config"
export ACTIVEMQ_OPTS="$base_opts ${ACTIVEMQ_OPTS:-} -Xms64m -Xmx$heap -Dactivemq.bind=0.0.0.0 -Djetty.host=0.0.0.0"
echo "activemq-entrypoint: console user $user; ACTIVEMQ_OPTS=$ACTIVEMQ_OPTS"
exec "${ACTIVEMQ_CONSOLE_EXEC:-$home/bin/activemq}" console
