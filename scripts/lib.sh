# Shared by scripts/run, scripts/test and scripts/bench. Sourced, not run.

# Installs Debian packages that are missing (needs root or sudo).
ensure_packages() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# A TCP port on 127.0.0.1 that nothing listens on.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Starts a throwaway redis-server (no persistence) on a free port; sets REDIS_PORT and REDIS_PID.
start_redis() {
  REDIS_PORT=$(free_port)
  local dir
  dir=$(mktemp -d /tmp/roundup-redis.XXXXXX)
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize no \
    >"$dir/redis.log" 2>&1 &
  REDIS_PID=$!
  for _ in $(seq 1 100); do
    redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "redis-server did not start; its log:" >&2
  cat "$dir/redis.log" >&2
  return 1
}

stop_redis() {
  [ -n "${REDIS_PID:-}" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null
  REDIS_PID=""
}

# What the server needs to build and run, and what the tests use besides.
RUNTIME_PACKAGES=(libhiredis-dev libsqlite3-dev redis-server redis-tools python3)

# Starts a throwaway PostgreSQL cluster (initdb + pg_ctl from Debian's postgresql package) on a free loopback port;
# sets PG_PORT, PG_DIR, PG_BIN and PG_URL (the `postgres` database, user `roundup`, trust auth on loopback only), and
# writes $PG_DIR/pgctl (stop | start), which the PostgreSQL restart tests and scripts/chaos call.
# initdb refuses to run as root, so as root the cluster belongs to the `postgres` user the package creates.
start_postgres() {
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -x "$PG_BIN/initdb" ] || { echo "initdb not found: install postgresql" >&2; return 1; }
  PG_PORT=$(free_port)
  PG_DIR=$(mktemp -d /tmp/roundup-pg.XXXXXX)
  local as=""
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres:postgres "$PG_DIR"
    as="runuser -u postgres --"
  fi
  $as "$PG_BIN/initdb" -D "$PG_DIR/data" -U roundup --auth=trust --no-sync -E UTF8 --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1 \
    || { cat "$PG_DIR/initdb.log" >&2; return 1; }
  # fsync stays on: the restart and crash tests mean something only with a durable server.
  cat >"$PG_DIR/pgctl" <<CTL
#!/usr/bin/env bash
# stop | start: the throwaway cluster in $PG_DIR.
if [ "\$1" = stop ]; then exec $as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop; fi
exec $as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \\
  -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$PG_DIR -c max_connections=400 -c shared_buffers=256MB" start
CTL
  chmod 755 "$PG_DIR/pgctl"
  "$PG_DIR/pgctl" start >/dev/null || { cat "$PG_DIR/server.log" >&2; return 1; }
  PG_URL="postgres://roundup@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
}

stop_postgres() {
  [ -n "${PG_DIR:-}" ] || return 0
  "$PG_DIR/pgctl" stop >/dev/null 2>&1 || true
  rm -rf "$PG_DIR"
  PG_DIR=""
}

# Starts a throwaway Redis Cluster of three primaries and three replicas (`redis-server --cluster-enabled yes`, append-
# only, created with `redis-cli --cluster create`) on free loopback ports below 55536 (each node's cluster bus listens on
# its port + 10000); sets REDIS_CLUSTER_URL (three seed nodes), REDIS_CLUSTER_DIR and REDIS_CLUSTER_PIDS.
start_redis_cluster() {
  REDIS_CLUSTER_DIR=$(mktemp -d /tmp/roundup-redis-cluster.XXXXXX)
  REDIS_CLUSTER_PIDS=()
  local ports=() port
  while [ ${#ports[@]} -lt 6 ]; do
    port=$(free_port)
    [ "$port" -lt 55536 ] || continue
    python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', $((port + 10000)))); s.close()" 2>/dev/null || continue
    ports+=("$port")
  done
  for port in "${ports[@]}"; do
    mkdir -p "$REDIS_CLUSTER_DIR/$port"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-node-timeout 3000 --repl-diskless-sync-delay 0 --appendonly yes --save "" --dir "$REDIS_CLUSTER_DIR/$port" \
      --daemonize no >"$REDIS_CLUSTER_DIR/$port/redis.log" 2>&1 &
    REDIS_CLUSTER_PIDS+=($!)
  done
  for port in "${ports[@]}"; do
    for _ in $(seq 1 100); do
      redis-cli -p "$port" ping >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
  local nodes=()
  for port in "${ports[@]}"; do nodes+=("127.0.0.1:$port"); done
  if ! redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$REDIS_CLUSTER_DIR/create.log" 2>&1; then
    echo "redis-cli --cluster create failed:" >&2
    cat "$REDIS_CLUSTER_DIR/create.log" >&2
    return 1
  fi
  # Every node says ok, every slot is served, and every replica is in sync.
  for _ in $(seq 1 300); do
    local healthy=1
    for port in "${ports[@]}"; do
      redis-cli -p "$port" cluster info 2>/dev/null | grep -q "cluster_state:ok" || healthy=0
      if redis-cli -p "$port" role 2>/dev/null | head -1 | grep -q slave; then
        redis-cli -p "$port" info replication 2>/dev/null | grep -q "master_link_status:up" || healthy=0
      fi
    done
    if [ "$healthy" = 1 ] && redis-cli --cluster check "${nodes[0]}" 2>/dev/null | grep -q "All 16384 slots covered"; then
      REDIS_CLUSTER_URL="redis://${nodes[0]},${nodes[1]},${nodes[2]}"
      return 0
    fi
    sleep 0.2
  done
  echo "the redis cluster did not become healthy; its logs are in $REDIS_CLUSTER_DIR" >&2
  return 1
}

stop_redis_cluster() {
  [ -n "${REDIS_CLUSTER_DIR:-}" ] || return 0
  for pid in "${REDIS_CLUSTER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${REDIS_CLUSTER_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$REDIS_CLUSTER_DIR"
  REDIS_CLUSTER_DIR=""
}
