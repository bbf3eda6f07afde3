import Crypto
import Foundation
import NIOCore
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting

// Worker throughput benchmark: fills the webhook stream, starts the real `roundup-worker` binary and times how
// long it takes to drain the stream into `pending_changes`.
// usage: roundup-bench worker REDIS_URL WORKER_BINARY SCENARIO(update|create) EVENTS
// BENCH_WORKERS (default 1) worker processes; the store is a new SQLite file, or with BENCH_STORE=postgres and
// ROUNDUP_TEST_POSTGRES_URL a new database on that server.

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("roundup-bench: \(message)\n".utf8))
    exit(2)
}

let args = CommandLine.arguments

// usage: roundup-bench api-seed DATABASE CHANGES — an account (its token printed) with that many pending changes.
// DATABASE is a SQLite path or a ROUNDUP_DATABASE_URL (sqlite:PATH, postgres://…).
if args.count == 4, args[1] == "api-seed", let count = Int(args[3]) {
    let url = args[2].hasPrefix("sqlite:") || args[2].contains("://") ? args[2] : "sqlite:" + args[2]
    let store = try await TestStore.open(url: url)
    let token = "rt_bench_" + UUID().uuidString
    let hash = SHA256Hex.of(token)
    let account = try await store.createAccount(authTokenHash: hash)
    let list = try await store.createSyncList(accountID: account, name: "Bench", trelloBoardID: "B1", trelloListID: "L1")
    var batch: [CardObservation] = []
    for i in 0..<count {
        let card: [String: JSONValue] = [
            "name": .string("Card \(i) with a realistic title"), "desc": .string(String(repeating: "notes ", count: 20)),
            "due": .string("2026-12-01T09:00:00.000Z"),
        ]
        batch.append(
            CardObservation(
                accountID: account, syncListID: list.id, cardID: "card-\(i)", actionID: "act-\(i)", actionDate: Date(),
                kind: .fields(CardMapper.fields(fromCard: card), full: true)))
        if batch.count == 2_000 || i == count - 1 {
            _ = try await store.apply(batch)
            batch.removeAll(keepingCapacity: true)
        }
    }
    print(token)
    exit(0)
}

// usage: roundup-bench sync ACCOUNTS ITEMS — sync-job throughput through the real ingress, worker and API (from this
// binary's directory) against the fake Trello with no rate limit: each account posts ITEMS creates, then ITEMS updates,
// then ITEMS completes, as jobs of at most 500 items. Then the echo-suppression rate: of the webhooks Trello sent back
// for those writes, how many did not become changes for the apps.
// usage: roundup-bench apns PUSHES [URL CA_FILE] — the APNs sender beside h2load, against the fake APNs or URL.
// usage: roundup-bench apns-send PUSHES CONNECTIONS URL CA_FILE — the sender alone (scripts/bench-cost).
if args.count == 3, args[1] == "apns", let pushes = Int(args[2]) {
    try await APNsBench.run(pushes: pushes)
    exit(0)
}
if args.count == 6, args[1] == "apns-send", let pushes = Int(args[2]), let connections = Int(args[3]) {
    try await APNsBench.sendOnly(pushes: pushes, connections: connections, url: args[4], caFile: args[5])
    exit(0)
}
if args.count == 5, args[1] == "apns", let pushes = Int(args[2]) {
    try await APNsBench.run(pushes: pushes, url: args[3], caFile: args[4])
    exit(0)
}

// usage: roundup-bench backlog CARDS [WORKERS] — a backlog of new cards drained under Trello's rate limit (BacklogBench).
if (3...4).contains(args.count), args[1] == "backlog", let cards = Int(args[2]) {
    try await BacklogBench.run(cards: cards, workers: args.count == 4 ? Int(args[3]) ?? 1 : 1)
    exit(0)
}

if args.count == 3, args[1] == "reconcile", let cards = Int(args[2]) {
    try await ReconcileBench.run(cards: cards)
    exit(0)
}

// usage: roundup-bench stream ACCOUNTS RATE SECONDS [IDLE_STREAMS] — webhook-to-stream latency (StreamBench).
if (5...6).contains(args.count), args[1] == "stream", let accounts = Int(args[2]), let rate = Int(args[3]), let seconds = Int(args[4]) {
    try await StreamBench.run(accounts: accounts, rate: rate, seconds: seconds, idleStreams: args.count == 6 ? Int(args[5]) ?? 0 : 0)
    exit(0)
}

// usage: roundup-bench dashboard RATE SECONDS PNG — the web dashboard under load, photographed (DashboardBench).
if args.count == 5, args[1] == "dashboard", let rate = Int(args[2]), let seconds = Int(args[3]) {
    try await DashboardBench.run(rate: rate, seconds: seconds, png: args[4])
    exit(0)
}

if args.count == 4, args[1] == "sync", let accounts = Int(args[2]), let items = Int(args[3]) {
    try await SyncBench.run(accounts: accounts, items: items)
    exit(0)
}

guard args.count == 6, args[1] == "worker", let events = Int(args[5]) else {
    fail("usage: roundup-bench worker REDIS_URL WORKER_BINARY update|create EVENTS")
}
let redisURL = args[2]
let workerBinary = URL(fileURLWithPath: args[3])
let scenario = args[4]
guard scenario == "update" || scenario == "create" else { fail("scenario must be update or create") }

let directory = try TestSupport.temporaryDirectory("bench")
guard let backend = StoreBackend(rawValue: ProcessInfo.processInfo.environment["BENCH_STORE"] ?? "sqlite") else {
    fail("BENCH_STORE must be sqlite or postgres")
}
let databaseURL = try await TestStore.makeURL(backend, in: directory)
let workerCount = Int(ProcessInfo.processInfo.environment["BENCH_WORKERS"] ?? "1") ?? 1
let keys = RedisKeys(prefix: "bench\(UUID().uuidString.prefix(6).lowercased()):")
// BENCH_REDIS_CLUSTER=true: REDIS_URL names a Redis Cluster's seed nodes.
let redisCluster = ProcessInfo.processInfo.environment["BENCH_REDIS_CLUSTER"] == "true"
let redis = RedisClient(configuration: try RedisConfiguration(url: redisURL, cluster: redisCluster))
let trello = try await FakeTrello.start()

// BENCH_ACCOUNTS accounts (default 1), each with a list and (for updates) its share of 1,000 cards the worker already
// knows, their creates acknowledged; event i is for account i mod BENCH_ACCOUNTS.
let store = try await TestStore.open(url: databaseURL)
let accountCount = max(1, Int(ProcessInfo.processInfo.environment["BENCH_ACCOUNTS"] ?? "1") ?? 1)
var accounts: [String] = []
let cards = scenario == "update" ? 1_000 : events
for n in 0..<accountCount {
    let account = try await store.createAccount(authTokenHash: UUID().uuidString)
    try await store.updateAccountCredentials(id: account, apiKey: "test-api-key", token: "test-token-\(n)", webhookSecret: "bench-secret")
    let list = try await store.createSyncList(accountID: account, name: "Bench", trelloBoardID: "B1", trelloListID: "L1")
    accounts.append(account)
    guard scenario == "update" else { continue }
    let seed = stride(from: n, to: cards, by: accountCount).map { i in
        CardObservation(
            accountID: account, syncListID: list.id, cardID: "card-\(i)", actionID: nil, actionDate: Date(timeIntervalSince1970: 1_600_000_000),
            kind: .fields(CardMapper.fields(fromCard: ["name": .string("Card \(i)")]), full: true))
    }
    _ = try await store.apply(seed)
    let ids = try await store.pendingChanges(accountID: account, afterID: 0, limit: cards).map(\.id)
    _ = try await store.acknowledge(accountID: account, acks: ids.map { ChangeAck(id: $0) })
}
if scenario != "update" {
    for i in 0..<cards { trello.setCard(FakeTrello.card(id: "card-\(i)", listID: "L1", boardID: "B1", name: "Card \(i)")) }
}

// Fill the stream the way the ingress does (same fields), in pipelined batches.
var batch: [RedisCommand] = []
for i in 0..<events {
    let card = "card-\(i % cards)"
    let date = Timestamp.string(Date(timeIntervalSince1970: 1_700_000_000 + Double(i) / 1000))
    let body =
        scenario == "update"
        ? WebhookBodies.body(
            type: "updateCard", actionID: "act-\(i)", cardID: card, listID: "L1", boardID: "B1",
            card: ["name": .string("Renamed \(i)")], old: ["name": .string("Card")], date: date, padding: 3_000)
        : WebhookBodies.body(type: "createCard", actionID: "act-\(i)", cardID: card, listID: "L1", boardID: "B1", date: date, padding: 3_000)
    let event = WebhookEvent(
        account: accounts[(i % cards) % accountCount], actionID: "act-\(i)", type: scenario == "update" ? "updateCard" : "createCard", model: "L1",
        receivedMilliseconds: 0,
        body: body)
    batch.append(.streamAppend(keys.webhookStream(WebhookShard(account: event.account)), fields: event.fields))
    if batch.count == 1_000 || i == events - 1 {
        _ = try await redis.pipeline(batch, timeout: .seconds(30)).get()
        batch.removeAll(keepingCapacity: true)
    }
}
let bodySize = WebhookBodies.body(
    type: "updateCard", actionID: "act-0", cardID: "card-0", listID: "L1", boardID: "B1", card: ["name": .string("Renamed 0")],
    old: ["name": .string("Card")], padding: 3_000
).count

let started = ContinuousClock.now
var workers: [ManagedProcess] = []
for n in 1...workerCount {
    workers.append(
        try ManagedProcess(
            name: "bench-worker-\(n)", executable: workerBinary,
            environment: [
                "ROUNDUP_REDIS_URL": redisURL, "ROUNDUP_REDIS_CLUSTER": redisCluster ? "true" : "false", "ROUNDUP_REDIS_PREFIX": keys.prefix,
                "ROUNDUP_DATABASE_URL": databaseURL,
                "ROUNDUP_TRELLO_API_URL": trello.baseURL, "ROUNDUP_WORKER_PORT": String(try TestSupport.freePort()),
                "LOG_LEVEL": ProcessInfo.processInfo.environment["BENCH_WORKER_LOG_LEVEL"] ?? "warning",
                "ROUNDUP_WORKER_NAME": "bench-\(n)",
                // The fake Trello has no rate limit; ours (100 per 10 s per token by default) would pace the card fetches.
                "ROUNDUP_TRELLO_TOKEN_LIMIT": "100000", "ROUNDUP_TRELLO_KEY_LIMIT": "100000",
            ],
            logDirectory: directory))
}
let drained = await TestSupport.eventually(timeout: .seconds(600), interval: .milliseconds(10)) {
    (try? await redis.length(of: .webhooks, keys: keys)) == 0
}
let elapsed = ContinuousClock.now - started
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
let rss =
    (try? String(contentsOfFile: "/proc/\(workers[0].pid)/status", encoding: .utf8))?
    .split(separator: "\n").first { $0.hasPrefix("VmHWM") }.map(String.init) ?? "VmHWM: ?"
// The workers' CPU time (user + system, from /proc/PID/stat): it moves less with the machine's load than the wall time.
let cpuSeconds = workers.reduce(0.0) { total, worker in
    guard let stat = try? String(contentsOfFile: "/proc/\(worker.pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return total }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    // After the command's ")": state is field 3 of the file, so utime (14) and stime (15) are at 11 and 12 here.
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return total }
    return total + (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}
// Under callgrind (scripts/bench-cost) a worker's orderly shutdown takes longer than the usual 10 s.
let stopGrace = Double(ProcessInfo.processInfo.environment["BENCH_STOP_SECONDS"] ?? "") ?? 10
for worker in workers { await worker.stop(grace: .seconds(stopGrace)) }
var written = 0
for account in accounts { written += try await store.pendingChanges(accountID: account, afterID: 0, limit: Int.max).count }
guard drained else { fail("worker did not drain the stream: \(workers[0].output.suffix(2000))") }
print(
    String(
        format:
            "worker %@ (%@, %d process%@, %d account%@): %d events (%d-byte bodies) in %.2f s = %.0f events/s; worker CPU %.2f s = %.0f events per CPU-second; %d pending-change rows; peak %@; Trello card requests %d",
        scenario, backend.rawValue, workerCount, workerCount == 1 ? "" : "es", accountCount, accountCount == 1 ? "" : "s", events, bodySize, seconds,
        Double(events) / seconds, cpuSeconds,
        Double(events) / max(cpuSeconds, 0.001), written,
        rss.replacingOccurrences(of: "\t", with: " "), trello.cardRequests))
await trello.stop()
await redis.shutdown()

enum SHA256Hex {
    static func of(_ text: String) -> String {
        SHA256.hash(data: Array(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
