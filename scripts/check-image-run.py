#!/usr/bin/env python3
"""The run half of scripts/check-image, inside a network namespace of its own (started by it; run alone only the same
way): a redis-server on this namespace's loopback, the image's processes started as docker-compose.yml says and as
the Kubernetes manifests run them, and what an operator relies on checked. Exits 1 naming each check that failed."""

import argparse
import json
import os
import re
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPOSE = os.path.join(ROOT, "deploy/container/docker-compose.yml")
KUBERNETES = os.path.join(ROOT, "deploy/kubernetes")
# The compose services that run the image, in the order they are started (the worker and the API migrate the store).
SERVICES = ["worker", "api", "ingress", "pusher"]
USER = "10001:10001"

failures = []


def step(message, since=None):
    """Says what was checked: `ok` when no check failed since `since` (a count of failures), else `FAILED`."""
    verdict = "" if since is None else ("ok: " if len(failures) == since else "FAILED: ")
    print(f"{time.strftime('%H:%M:%S')} check-image: {verdict}{message}", file=sys.stderr, flush=True)


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"  FAILED: {message}", file=sys.stderr, flush=True)
    return condition


def run(*command, check_status=True, capture=True):
    result = subprocess.run(command, capture_output=capture, text=True)
    if check_status and result.returncode != 0:
        raise SystemExit(f"check-image: {' '.join(command[:4])}… exited {result.returncode}: {result.stderr.strip()[-2000:]}")
    return result


def substitute(value, known):
    """`${NAME}`, `${NAME:-default}` and `${NAME:?message}` as compose reads them, from `known`."""

    def replace(match):
        name, operator, rest = match.group(1), match.group(2), match.group(3)
        if name in known:
            return known[name]
        if operator == ":-":
            return rest or ""
        if operator == ":?":
            raise SystemExit(f"check-image: the compose file needs {name} ({rest}) and the check does not set it")
        return ""

    return re.sub(r"\$\{([A-Z0-9_]+)(?:(:-|:\?)([^}]*))?\}", replace, str(value))


def http(method, url, token=None, timeout=5):
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--image", required=True)
    parser.add_argument("--volume", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("podman_limits", nargs="*")
    options = parser.parse_args()
    limits = options.podman_limits

    run("ip", "link", "set", "lo", "up")
    redis_dir = os.path.join(options.work, "redis")
    os.makedirs(redis_dir, exist_ok=True)
    run("redis-server", "--port", "6379", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", redis_dir,
        "--daemonize", "yes", "--logfile", os.path.join(redis_dir, "redis.log"))
    for _ in range(50):
        if run("redis-cli", "-p", "6379", "ping", check_status=False).stdout.strip() == "PONG":
            break
        time.sleep(0.1)

    # What the compose file leaves to the operator's shell, and a real APNs key (its pusher refuses to start without).
    apns_key = os.path.join(options.work, "apns.p8")
    run("sh", "-c", f"openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out {apns_key}")
    os.chmod(apns_key, 0o644)
    bootstrap = secrets.token_hex(16)
    known = {
        "ROUNDUP_PUBLIC_URL": "https://roundup.example.org", "ROUNDUP_BOOTSTRAP_TOKEN": bootstrap,
        "ROUNDUP_APNS_KEY_ID": "ABCDE12345", "ROUNDUP_APNS_TEAM_ID": "TEAM012345", "ROUNDUP_APNS_TOPIC": "org.example.DailyRoundup",
    }
    with open(COMPOSE) as file:
        compose = yaml.safe_load(file)
    services = compose["services"]

    def containers():
        return [f"{options.prefix}-{name}" for name in SERVICES]

    def remove_all():
        for name in containers():
            run("podman", "rm", "--force", "--time", "0", name, check_status=False)

    remove_all()
    run("podman", "volume", "rm", "--force", options.volume, check_status=False)
    run("podman", "volume", "create", options.volume)

    def start(name):
        service = services[name]
        environment = {variable: substitute(value, known) for variable, value in (service.get("environment") or {}).items()}
        # The compose network's `redis` is this namespace's loopback (host networking: no names to add).
        environment["ROUNDUP_REDIS_URL"] = environment["ROUNDUP_REDIS_URL"].replace("//redis:", "//127.0.0.1:")
        command = ["podman", "run", "--detach", "--name", f"{options.prefix}-{name}", "--network=host", "--pull=never",
                   # As the Kubernetes manifests run it: a read-only root, /tmp a tmpfs, no capabilities.
                   "--read-only", "--tmpfs", "/tmp", "--cap-drop=ALL", "--security-opt=no-new-privileges", *limits]
        for variable, value in environment.items():
            command += ["--env", f"{variable}={value}"]
        for volume in service.get("volumes") or []:
            source, target = volume.split(":")[0], volume.split(":")[1]
            if source == "roundup-data":
                command += ["--volume", f"{options.volume}:{target}"]
            elif source.endswith("apns.p8"):
                command += ["--volume", f"{apns_key}:{target}:ro"]
            else:
                raise SystemExit(f"check-image: the compose file's volume {volume} of {name} is unknown to the check")
        run(*command, options.image, *service["command"])

    def healthy(name, timeout=60):
        """The compose file's own health check, run in the container until it passes."""
        test = services[name]["healthcheck"]["test"]
        assert test[0] == "CMD", test
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if run("podman", "exec", f"{options.prefix}-{name}", *test[1:], check_status=False).returncode == 0:
                return True
            state = run("podman", "inspect", "--format", "{{.State.Status}}", f"{options.prefix}-{name}").stdout.strip()
            if state != "running":
                break
            time.sleep(0.5)
        logs = run("podman", "logs", "--tail", "30", f"{options.prefix}-{name}", check_status=False)
        print(logs.stdout + logs.stderr, file=sys.stderr)
        return False

    try:
        for name in SERVICES:
            start(name)
        since = len(failures)
        for name in SERVICES:
            check(healthy(name), f"{name}: docker-compose.yml's health check (GET /healthz with bash's /dev/tcp) does not pass")
        step("the compose health checks pass (GET /healthz of each process, from inside its container)", since)
        since = len(failures)

        # Who each process runs as: the kernel's word (the host's /proc; rootful podman maps ids one to one), and the
        # names the image gives them.
        for name in SERVICES:
            container = f"{options.prefix}-{name}"
            pid = run("podman", "inspect", "--format", "{{.State.Pid}}", container).stdout.strip()
            if not check(pid not in ("", "0"), f"{name} is not running"):
                continue
            with open(f"/proc/{pid}/status") as file:
                status = dict(line.split(":", 1) for line in file if ":" in line)
            uids, gids = status["Uid"].split(), status["Gid"].split()
            check(set(uids) == {"10001"} and set(gids) == {"10001"}, f"{name} runs as uid {uids} gid {gids}, not 10001:10001")
            names = run("podman", "exec", container, "id", "-un", check_status=False).stdout.strip(), run(
                "podman", "exec", container, "id", "-gn", check_status=False).stdout.strip()
            check(names == ("roundup", "roundup"), f"{name}: user and group are named {names}, not roundup/roundup")
        step("every process runs as 10001:10001 (roundup:roundup)", since)
        since = len(failures)

        # The store: in the volume, owned by the image's user; an account made through the API outlives its container.
        owner = run("podman", "exec", f"{options.prefix}-api", "stat", "-c", "%u:%g", "/var/lib/roundup/roundup.sqlite",
                    check_status=False)
        check(owner.returncode == 0 and owner.stdout.strip() == USER,
              f"the SQLite file in the volume: {owner.stdout.strip() or owner.stderr.strip()}")
        api = "http://127.0.0.1:" + services["api"]["environment"]["ROUNDUP_API_PORT"]
        status, body = http("POST", f"{api}/dailyroundup/account", token=bootstrap)
        check(status == 201, f"POST /dailyroundup/account answered {status}: {body[:200]!r}")
        account = json.loads(body) if status == 201 else {}
        stopped = time.monotonic()
        run("podman", "stop", "--time", "30", f"{options.prefix}-api")
        exit_code = run("podman", "inspect", "--format", "{{.State.ExitCode}}", f"{options.prefix}-api").stdout.strip()
        check(exit_code == "0", f"api: SIGTERM ended it with status {exit_code}, not 0")
        run("podman", "rm", f"{options.prefix}-api")
        start("api")
        check(healthy("api"), "api: a new container on the same volume does not come up")
        status, body = http("GET", f"{api}/dailyroundup/account", token=account.get("auth_token"))
        check(status == 200 and json.loads(body).get("account_id") == account.get("account_id"),
              f"the account made before the API's container was replaced: GET /dailyroundup/account answered {status}")
        step(f"the SQLite file is in the volume, owned {USER}, and an account outlives its container "
             f"(replaced in {time.monotonic() - stopped:.1f} s)", since)
        since = len(failures)

        # SIGTERM: each process finishes and exits 0 within its compose stop_grace_period.
        for name in SERVICES:
            grace = services[name].get("stop_grace_period", "10s")
            seconds = int(grace.rstrip("s"))
            began = time.monotonic()
            run("podman", "stop", "--time", str(seconds), f"{options.prefix}-{name}")
            took = time.monotonic() - began
            exit_code = run("podman", "inspect", "--format", "{{.State.ExitCode}}", f"{options.prefix}-{name}").stdout.strip()
            check(exit_code == "0" and took < seconds,
                  f"{name}: SIGTERM ended it with status {exit_code} after {took:.1f} s (grace {grace})")
        step("SIGTERM ends every process with status 0 within its grace period", since)

        check_files_against_image(options.image, services, limits)
    finally:
        remove_all()
        run("podman", "volume", "rm", "--force", options.volume, check_status=False)
        run("redis-cli", "-p", "6379", "shutdown", "nosave", check_status=False)

    if failures:
        print(f"check-image: {len(failures)} check(s) failed:", file=sys.stderr)
        for failure in failures:
            print(f"  - {failure}", file=sys.stderr)
        sys.exit(1)


def check_files_against_image(image, services, limits):
    """The compose and Kubernetes files name only what the image has."""
    since = len(failures)
    executables, users, data_paths = set(), set(), set()
    for name, service in services.items():
        if not str(service.get("image", "")).startswith("roundup-server"):
            continue
        executables.add(service["command"][0])
        test = (service.get("healthcheck") or {}).get("test") or []
        if test and test[0] == "CMD":
            executables.add(test[1])
        for volume in service.get("volumes") or []:
            source, target = volume.split(":")[0], volume.split(":")[1]
            if not source.startswith("."):
                data_paths.add(target)
    for root, _, files in os.walk(KUBERNETES):
        for file_name in files:
            if not file_name.endswith(".yaml"):
                continue
            with open(os.path.join(root, file_name)) as file:
                for document in yaml.safe_load_all(file):
                    for pod in pods(document):
                        context = pod.get("securityContext") or {}
                        for key in ("runAsUser", "runAsGroup", "fsGroup"):
                            if key in context:
                                users.add((f"{file_name} pod {key}", str(context[key])))
                        for container in pod.get("containers", []) + pod.get("initContainers", []):
                            if not str(container.get("image", "")).startswith("roundup-server"):
                                continue
                            if container.get("command"):
                                executables.add(container["command"][0])
                            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                                command = ((container.get(probe) or {}).get("exec") or {}).get("command")
                                if command:
                                    executables.add(command[0])
                            for hook in ((container.get("lifecycle") or {}).values()):
                                command = ((hook or {}).get("exec") or {}).get("command")
                                if command:
                                    executables.add(command[0])
                            security = container.get("securityContext") or {}
                            for key in ("runAsUser", "runAsGroup"):
                                if key in security:
                                    users.add((f"{file_name} {container['name']} {key}", str(security[key])))
                            # Where a process writes: a mount not read-only, not a tmpfs or a secret's.
                            for mount in container.get("volumeMounts") or []:
                                path = mount.get("mountPath")
                                if path and not mount.get("readOnly") and not path.startswith(("/tmp", "/run", "/var/run")):
                                    data_paths.add(path)
    image_user = run("podman", "image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip()
    check(image_user == USER, f"the image's USER is {image_user!r}, not {USER}")
    for where, value in sorted(users):
        check(value == "10001", f"{where} is {value}; the image runs as {image_user}")
    script = "; ".join(
        [f'command -v {name} >/dev/null || echo "missing executable {name}"' for name in sorted(executables)]
        + [f'[ "$(stat -c %u:%g {path} 2>/dev/null)" = "{USER}" ] || echo "data path {path} is not a directory owned {USER}"'
           for path in sorted(data_paths)]
        + ['[ "$(getent group roundup | cut -d: -f3)" = 10001 ] || echo "group roundup is not gid 10001"'])
    answer = run("podman", "run", "--rm", "--pull=never", "--network=host", *limits, "--entrypoint", "bash", image, "-c", script,
                 check_status=False)
    for line in (answer.stdout + answer.stderr).splitlines():
        check(False, f"compose/Kubernetes files against the image: {line}")
    step(f"the compose and Kubernetes files name only what the image has ({len(executables)} executables: "
         f"{', '.join(sorted(executables))}; data paths {', '.join(sorted(data_paths))}; users {len(users)})", since)


def pods(document):
    """Every pod spec in a manifest (a Deployment's, a StatefulSet's, a Job's, a bare Pod)."""
    if not isinstance(document, dict):
        return []
    spec = document.get("spec") or {}
    if document.get("kind") == "Pod":
        return [spec]
    template = (spec.get("template") or {}).get("spec")
    if template:
        return [template]
    job = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template", {}).get("spec")
    return [job] if job else []


if __name__ == "__main__":
    main()
