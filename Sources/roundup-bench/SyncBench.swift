import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting

/// The stack both API-driven benchmarks start: its own redis-server, the ingress, one worker and the API, with no rate
/// limits of ours in the way (the fake Trello has none either).
enum BenchStack {
    static let bootstrap = "bench-bootstrap-0123456789"

    static func start(worker extra: [String: String]) async throws -> Stack {
        var settings = [
            "ROUNDUP_TRELLO_TOKEN_LIMIT": "100000", "ROUNDUP_TRELLO_KEY_LIMIT": "100000", "ROUNDUP_API_RATE_LIMIT": "1000000",
            "LOG_LEVEL": "warning",
        ]
        for (key, value) in extra { settings[key] = value }
        let stack = try await Stack(privateRedis: true)
        try await stack.startIngress(extra: ["LOG_LEVEL": "warning"])
        try await stack.startWorker(name: "bench", extra: settings)
        try await stack.startAPI(bootstrapToken: bootstrap, extra: settings)
        return stack
    }

    /// A response's JSON, or the benchmark stops with the response.
    static func json(_ response: Stack.Response) throws -> JSONValue {
        guard response.status.code < 300 else { benchFail("\(response.status): \(response.body)") }
        return response.json
    }

    /// An account with Trello credentials and one synced list; returns its API token and the list's id.
    static func account(_ stack: Stack, list: String, board: String) async throws -> (token: String, list: String) {
        let token = try json(try await stack.callAPI(.POST, "/dailyroundup/account", token: bootstrap))["auth_token"]!.stringValue!
        _ = try json(
            try await stack.callAPI(
                .PUT, "/dailyroundup/account", token: token,
                body: JSONValue.object([
                    "trello_api_key": "test-api-key", "trello_token": "test-token", "trello_webhook_secret": .string(stack.trello.webhookSecret),
                ]).canonicalJSON))
        stack.trello.addList(id: list, boardID: board)
        let body = #"{"name":"Bench","trello_board_id":"\#(board)","trello_list_id":"\#(list)"}"#
        return (token, try json(try await stack.callAPI(.POST, "/dailyroundup/lists", token: token, body: body))["sync_list_id"]!.stringValue!)
    }
}

/// `roundup-bench sync ACCOUNTS ITEMS`: sync-job throughput through the real ingress, worker and API (from this
/// binary's directory) against the fake Trello with no rate limit: each account posts ITEMS creates, then ITEMS
/// updates, then ITEMS completes, as jobs of at most 500 items. Then the echo-suppression rate: of the webhooks Trello
/// sent back for those writes, how many did not become changes for the apps.
enum SyncBench {
    static func run(accounts: Int, items: Int) async throws {
        let stack = try await BenchStack.start(worker: ["ROUNDUP_JOB_CONCURRENCY": "16"])
        let json = BenchStack.json
        var setups: [(token: String, list: String)] = []
        for i in 0..<accounts { setups.append(try await BenchStack.account(stack, list: "L\(i)", board: "B\(i)")) }
        func change(_ op: String, _ list: String, _ n: Int, _ fields: [String: JSONValue], _ changed: [String]?) -> JSONValue {
            var object: [String: JSONValue] = [
                "op": .string(op), "sync_list_id": .string(list), "reminder_id": .string("r\(n)"), "fields": .object(fields),
                "modified_at": .string(Timestamp.now()),
            ]
            if let changed { object["changed_fields"] = .array(changed.map(JSONValue.string)) }
            return .object(object)
        }
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for setup in setups {
                group.addTask {
                    let phases: [(String, (Int) -> ([String: JSONValue], [String]?))] = [
                        ("create", { n in (["title": .string("Bench task \(n)"), "notes": "from the bench"], nil) }),
                        ("update", { n in (["title": .string("Bench task \(n), renamed")], ["title"]) }),
                        ("complete", { _ in ([:], nil) }),
                    ]
                    for (op, make) in phases {
                        for start in stride(from: 0, to: items, by: 500) {
                            let changes = (start..<min(items, start + 500)).map { n in
                                let (fields, changed) = make(n)
                                return change(op, setup.list, n, fields, changed)
                            }
                            let body = JSONValue.object(["device_id": "bench", "changes": .array(changes)]).canonicalJSON
                            var job = try json(try await stack.callAPI(.POST, "/dailyroundup/sync", token: setup.token, body: body))
                            let id = job["job_id"]!.stringValue!
                            while ["queued", "running"].contains(job["status"]?.stringValue) {
                                try await Task.sleep(for: .milliseconds(20))
                                job = try json(try await stack.callAPI(.GET, "/dailyroundup/sync/jobs/\(id)", token: setup.token))
                            }
                            let failed = (job["results"]?.arrayValue ?? []).filter { $0["status"]?.stringValue != "ok" }
                            if job["status"]?.stringValue != "completed" || !failed.isEmpty {
                                benchFail("job \(id): \(job["status"] ?? .null) \(failed.prefix(3))")
                            }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        await stack.trello.waitForWebhookDeliveries()
        _ = await TestSupport.eventually(timeout: .seconds(120)) { (try? await stack.streamLength()) == 0 }
        try await Task.sleep(for: .seconds(1))
        var leaked = 0
        for setup in setups {
            leaked +=
                (try json(try await stack.callAPI(.GET, "/dailyroundup/changes?limit=500", token: setup.token))["changes"]?.arrayValue ?? []).count
        }
        let echoes = stack.trello.webhooksSent
        let total = accounts * items * 3
        print(
            String(
                format:
                    "sync: %d accounts x %d items x 3 ops = %d items in %.2f s = %.0f items/s; Trello sent %d webhooks back, %d became changes for the apps (suppression %.2f%%); cards created %d",
                accounts, items, total, seconds, Double(total) / seconds, echoes, leaked,
                echoes == 0 ? 0 : 100 * Double(echoes - leaked) / Double(echoes), stack.trello.cardsCreated))
        await stack.shutdown()
    }
}

func benchFail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("roundup-bench: \(message)\n".utf8))
    exit(2)
}

/// `roundup-bench reconcile CARDS`: one list of CARDS cards in the fake Trello (no rate limit) that the server has never
/// heard of; times an on-demand reconciliation (every card a create), then a second one (in sync, nothing emitted), and
/// counts the Trello requests each cost.
enum ReconcileBench {
    static func run(cards: Int) async throws {
        let stack = try await BenchStack.start(worker: ["ROUNDUP_RECONCILE_INTERVAL_SECONDS": "0"])
        let json = BenchStack.json
        let (token, list) = try await BenchStack.account(stack, list: "Lbench", board: "Bbench")
        for i in 0..<cards {
            stack.trello.setCard(
                FakeTrello.card(
                    id: String(format: "%024x", 0x5000_0000 + i), listID: "Lbench", boardID: "Bbench", name: "Card \(i)", desc: "Notes for card \(i)")
            )
        }
        var lines: [String] = []
        for label in ["first run (every card new)", "second run (in sync)"] {
            let requestsBefore = stack.trello.state.withLockedValue { $0.requests.count }
            let started = ContinuousClock.now
            var job = try json(try await stack.callAPI(.POST, "/dailyroundup/lists/\(list)/reconcile", token: token))
            let id = job["job_id"]!.stringValue!
            while ["queued", "running"].contains(job["status"]?.stringValue) {
                try await Task.sleep(for: .milliseconds(10))
                job = try json(try await stack.callAPI(.GET, "/dailyroundup/sync/jobs/\(id)", token: token))
            }
            let elapsed = ContinuousClock.now - started
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            guard job["status"]?.stringValue == "completed" else { benchFail("reconcile: \(job)") }
            let requests = stack.trello.state.withLockedValue { $0.requests.count } - requestsBefore
            let changes = job["results"]?.arrayValue?.first?["summary"]?["changes"]?.canonicalJSON ?? "?"
            lines.append(
                String(
                    format: "reconcile, %@: %d cards in %.2f s = %.0f cards/s; %d Trello requests; changes emitted %@",
                    label, cards, seconds, Double(cards) / seconds, requests, changes))
        }
        await stack.shutdown()
        for line in lines { print(line) }
    }
}

/// `roundup-bench backlog CARDS [WORKERS]`: a backlog of CARDS new cards in one list, their webhooks waiting in the stream
/// (a list copied while the worker was down, an outage, a full Redis), drained under Trello's limit of 100 requests per
/// 10 s per token, which the fake Trello enforces (429 past it) and the server's shared rate windows respect. Times the
/// drain from the worker's start, and counts what it asked Trello.
enum BacklogBench {
    static func run(cards: Int, workers: Int) async throws {
        let stack = try await Stack(privateRedis: true)
        try await stack.startIngress(extra: ["LOG_LEVEL": "warning"])
        try await stack.startAPI(bootstrapToken: BenchStack.bootstrap, extra: ["LOG_LEVEL": "warning", "ROUNDUP_API_RATE_LIMIT": "1000000"])
        let (token, _) = try await BenchStack.account(stack, list: "Lbacklog", board: "Bbacklog")
        stack.trello.setTokenLimit(100)
        let made = ContinuousClock.now
        for n in 0..<cards { _ = stack.trello.userCreateCard(listID: "Lbacklog", name: "Card \(n)", desc: "Copied card \(n)") }
        await stack.trello.waitForWebhookDeliveries()
        let delivered = ContinuousClock.now - made
        // The worker was down: what waits is older than the read that will serve it.
        try await Task.sleep(for: .seconds(6))
        let queued = try await stack.streamLength()
        let requestsBefore = stack.trello.state.withLockedValue { $0.requests.count }
        let cardReadsBefore = stack.trello.cardRequests
        let started = ContinuousClock.now
        for n in 0..<workers { try await stack.startWorker(name: "backlog\(n)", extra: ["LOG_LEVEL": "warning"]) }
        while true {
            if try await stack.streamLength() == 0, try await stack.redis.pendingCount(of: .webhooks, keys: stack.keys) == 0 { break }
            if ContinuousClock.now - started > .seconds(3_600) { benchFail("backlog not drained in an hour") }
            try await Task.sleep(for: .milliseconds(100))
        }
        let drained = ContinuousClock.now - started
        var changes = 0
        var after = 0
        while true {
            let page = try BenchStack.json(try await stack.callAPI(.GET, "/dailyroundup/changes?after_id=\(after)&limit=500", token: token))
            let items = page["changes"]?.arrayValue ?? []
            changes += items.count
            guard case .number(let last)? = items.last?["id"], items.count == 500 else { break }
            after = Int(last)
        }
        let requests = stack.trello.state.withLockedValue { $0.requests.count } - requestsBefore
        let cardReads = stack.trello.cardRequests - cardReadsBefore
        let listReads = stack.trello.listReads("Lbacklog")
        let peak = stack.trello.maxRequestsInAnyWindow(token: "test-token")
        await stack.shutdown()
        func seconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18 }
        print(
            String(
                format:
                    "backlog: %d new cards of one list (%d webhooks queued in %.1f s), %d worker(s): drained in %.1f s; %d changes; "
                    + "%d Trello requests (%d list reads, %d card reads), at most %d in any 10 s",
                cards, queued, seconds(delivered), workers, seconds(drained), changes, requests, listReads, cardReads, peak))
        guard changes == cards else { benchFail("\(changes) changes for \(cards) cards") }
    }
}
