import Foundation
import GRDB
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupTesting

// The fault suite's long part (scripts/chaos): real processes under a steady webhook load, broken on purpose, and
// what became of every webhook that got its 200. Prints one Markdown table row per scenario.
// usage: roundup-chaos [SCENARIO …]   (all when none is named)
//        roundup-chaos hostile          (the hostile-traffic figures: junk floods, stalled connections, a full Redis)

typealias Scenario = (name: String, run: @Sendable () async throws -> ChaosRow)

/// Kills the process `pick` returns, `times` times, `every` apart, restarting it after `down`.
func killRepeatedly(
    times: Int, every: Duration, down: Duration = .milliseconds(500), kill: @escaping @Sendable () async throws -> Void,
    restart: @escaping @Sendable () async throws -> Void
) async throws -> [String] {
    for _ in 0..<times {
        try await Task.sleep(for: every)
        try await kill()
        try await Task.sleep(for: down)
        try await restart()
    }
    return ["\(times) SIGKILLs, \(every) apart, each restarted after \(down)"]
}

let scenarios: [Scenario] = [
    (
        "baseline",
        {
            try await Chaos.run("baseline", fault: "none: two workers, 300 webhooks at 100/s") { _ in [] }
        }
    ),
    (
        "kill-worker",
        {
            try await Chaos.run("kill-worker", fault: "SIGKILL a worker (of two) ×4 mid-batch") { stack in
                try await killRepeatedly(times: 4, every: .milliseconds(600)) {
                    let victim = stack.workers.last { $0.isRunning }
                    victim?.signal(SIGKILL)
                    _ = await victim?.wait()
                } restart: {
                    try await stack.startWorker(name: "w\(stack.workers.count + 1)", extra: Chaos.worker)
                }
            }
        }
    ),
    (
        "kill-ingress",
        {
            try await Chaos.run("kill-ingress", fault: "SIGKILL the ingress ×3 (Trello retries what got no 200)") { stack in
                try await killRepeatedly(times: 3, every: .milliseconds(700)) {
                    stack.ingress?.signal(SIGKILL)
                    _ = await stack.ingress?.wait()
                } restart: {
                    try await stack.startIngress()
                }
            }
        }
    ),
    ("kill-api", { try await ChaosScenarios.killAPI() }),
    ("kill-pusher", { try await ChaosScenarios.killPusher() }),
    (
        "redis-crash-everysec",
        {
            try await ChaosScenarios.redisCrash(fsync: "everysec")
        }
    ),
    (
        "redis-crash-always",
        {
            try await ChaosScenarios.redisCrash(fsync: "always")
        }
    ),
    ("sqlite-locked", { try await ChaosScenarios.sqliteLocked() }),
    ("postgres-restart", { try await ChaosScenarios.postgresRestart() }),
    (
        "trello-5xx",
        {
            try await Chaos.run("trello-5xx", fault: "Trello answers 500 to the next 400 card reads") { stack in
                stack.trello.failNextCardRequests(status: 500, count: 400)
                return []
            }
        }
    ),
    (
        "trello-429",
        {
            try await Chaos.run("trello-429", fault: "Trello's own limit at 40 requests per 10 s per token (429 with its headers)") { stack in
                stack.trello.setTokenLimit(40)
                try await Task.sleep(for: .seconds(4))
                stack.trello.setTokenLimit(nil)
                return ["limit lifted after 4 s"]
            }
        }
    ),
    (
        "trello-slow",
        {
            try await Chaos.run("trello-slow", fault: "card reads take 12 s (beyond the 10 s timeout) for 3 s, then 300 ms") { stack in
                stack.trello.setCardDelay(.seconds(12))
                try await Task.sleep(for: .seconds(3))
                stack.trello.setCardDelay(.milliseconds(300))
                try await Task.sleep(for: .seconds(3))
                stack.trello.setCardDelay(.zero)
                return []
            }
        }
    ),
    ("trello-deleted-card", { try await ChaosScenarios.deletedCards() }),
    ("apns-faults", { try await ChaosScenarios.apnsFaults() }),
    ("apns-timeouts", { try await ChaosScenarios.apnsTimeouts() }),
]

if CommandLine.arguments.count == 2, CommandLine.arguments[1] == "hostile" {
    let (lines, met) = try await HostileFigures.run()
    for line in lines { print(line) }
    exit(met ? 0 : 1)
}

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "serve" {
    try await ChaosServe.run(stopFile: CommandLine.arguments[2])
    exit(0)
}

let wanted = Set(CommandLine.arguments.dropFirst())
let unknown = wanted.subtracting(scenarios.map(\.name))
guard unknown.isEmpty else {
    FileHandle.standardError.write(Data("roundup-chaos: unknown scenario(s) \(unknown.sorted()); known: \(scenarios.map(\.name))\n".utf8))
    exit(2)
}
print("| scenario | fault | webhooks sent | accepted (200) | applied | dead-lettered | lost | duplicated | notes |")
print("|---|---|---|---|---|---|---|---|---|")
var failed = false
for scenario in scenarios where wanted.isEmpty || wanted.contains(scenario.name) {
    let started = ContinuousClock.now
    do {
        let row = try await scenario.run()
        let notes = (row.notes + ["\(Int((ContinuousClock.now - started).components.seconds)) s"]).joined(separator: "; ")
        print(
            "| \(row.name) | \(row.fault) | \(row.sent) | \(row.accepted) | \(row.applied) | \(row.deadLettered) | **\(row.lost)** | **\(row.duplicated)** | \(notes) |"
        )
        if row.lost > 0 || row.duplicated > 0 { failed = true }
    } catch {
        failed = true
        print("| \(scenario.name) | | | | | | | | did not complete: \(error) |")
    }
}
exit(failed ? 1 : 0)
