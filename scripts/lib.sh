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
