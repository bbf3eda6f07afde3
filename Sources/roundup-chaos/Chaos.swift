import Foundation
import GRDB
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting

/// One scenario's outcome, a row of docs/RELIABILITY.md.
struct ChaosRow {
    var name: String
    var fault: String
    var sent = 0
    var accepted = 0
    var applied = 0
    var deadLettered = 0
    var lost = 0
    var duplicated = 0
    var notes: [String] = []
}

/// A webhook load like Trello's: one createCard per card, paced; a delivery that fails (no answer, or not 2xx) is
/// tried again, as Trello retries, until it gets its 200 or runs out of attempts.
struct WebhookLoad {
    var count: Int
    var perSecond: Double
    var attempts = 40
    var retryPause = Duration.milliseconds(250)

    /// Posts every card's webhook; returns the cards whose webhook got a 200.
    func run(_ stack: Stack, account: String, cardPrefix: String) async -> Set<String> {
        let interval = Duration.milliseconds(Int(1000 / perSecond))
        let path = (try? await stack.webhookPath(account: account)) ?? "/dailyroundup/webhook/trello/\(account)"
        return await withTaskGroup(of: String?.self) { group in
            for i in 0..<count {
                let card = "\(cardPrefix)\(i)"
                group.addTask {
                    let body = WebhookBodies.body(type: "createCard", actionID: "\(card)-create", cardID: card, listID: "L1", boardID: "B1")
                    for _ in 0..<attempts {
                        if let response = try? await stack.postWebhook(path: path, body: body, secret: Chaos.secret),
                            response.status == .ok
                        {
                            return card
                        }
                        try? await Task.sleep(for: retryPause)
                    }
                    return nil
                }
                try? await Task.sleep(for: interval)
            }
            var accepted = Set<String>()
            for await card in group { if let card { accepted.insert(card) } }
            return accepted
        }
    }
}

enum Chaos {
    static let secret = "whsec-chaos-0123456789abcdef"
    static let bootstrap = "bootstrap-chaos-0123456789"

    /// An account with list L1 on board B1 and `count` cards in the fake Trello, made before any worker starts.
    static func seed(_ stack: Stack, cards count: Int, prefix: String) async throws -> String {
        let store = try await stack.store()
        let account = try await store.createAccount(authTokenHash: UUID().uuidString)
        try await store.updateAccountCredentials(id: account, apiKey: "test-api-key", token: "test-token", webhookSecret: secret)
        _ = try await store.createSyncList(accountID: account, name: "Chaos", trelloBoardID: "B1", trelloListID: "L1")
        for i in 0..<count { stack.trello.setCard(FakeTrello.card(id: "\(prefix)\(i)", listID: "L1", boardID: "B1", name: "Task \(i)")) }
        return account
    }

    /// Worker settings for quick recovery in a bounded run: a dead worker's entries are claimed after two seconds.
    static let worker = ["ROUNDUP_CLAIM_IDLE_MS": "2000", "ROUNDUP_RECONCILE_INTERVAL_SECONDS": "0", "ROUNDUP_WORKER_BATCH": "50"]

    /// Waits until the stream is drained and nothing is pending, then counts what the store holds for `accepted`.
    static func settle(_ stack: Stack, account: String, accepted: Set<String>, row: inout ChaosRow, timeout: Duration = .seconds(120)) async throws {
        let drained = await TestSupport.eventually(timeout: timeout, interval: .milliseconds(200)) {
            guard (try? await stack.streamLength()) == 0 else { return false }
            return (try? await stack.redis.pendingCount(of: .webhooks, keys: stack.keys)) == 0
        }
        if !drained { row.notes.append("the stream did not drain within \(timeout)") }
        let store = try await stack.store()
        let changes = try await store.pendingChanges(accountID: account, afterID: 0, limit: 1_000_000)
        var perCard: [String: Int] = [:]
        for change in changes { perCard[change.trelloCardID, default: 0] += 1 }
        row.accepted = accepted.count
        row.applied = accepted.filter { perCard[$0] != nil }.count
        row.duplicated = perCard.values.filter { $0 > 1 }.count
        row.deadLettered = try await stack.redis.deadLetterCount(of: .webhooks, keys: stack.keys)
        row.lost = max(0, row.accepted - row.applied - row.deadLettered)
        let unknown = Set(perCard.keys).subtracting(accepted)
        if !unknown.isEmpty { row.notes.append("\(unknown.count) cards applied whose webhook never got a 200 (Trello would have retried them)") }
    }

    /// The common shape: a stack, an account, workers and the ingress, a load, a fault while it runs, the count.
    static func run(
        _ name: String, fault: String, store: StoreBackend = .sqlite, cards: Int = 300, perSecond: Double = 100, workers: Int = 2,
        redisArguments: [String] = [],
        workerExtra: [String: String] = [:], before: (Stack) async throws -> Void = { _ in },
        during: @escaping @Sendable (Stack) async throws -> [String]
    ) async throws -> ChaosRow {
        var row = ChaosRow(name: name, fault: fault)
        let stack = try await Stack(store: store, redisArguments: redisArguments)
        let prefix = "C\(name.filter(\.isLetter).prefix(6))"
        let account = try await seed(stack, cards: cards, prefix: prefix)
        try await before(stack)
        for n in 1...workers { try await stack.startWorker(name: "w\(n)", extra: worker.merging(workerExtra) { $1 }) }
        try await stack.startIngress()
        row.sent = cards
        async let accepted = WebhookLoad(count: cards, perSecond: perSecond).run(stack, account: account, cardPrefix: prefix)
        let notes = try await during(stack)
        let done = await accepted
        row.notes += notes
        try await settle(stack, account: account, accepted: done, row: &row)
        await stack.shutdown()
        return row
    }
}

/// `roundup-chaos serve STOPFILE`: a whole stack (ingress, worker, API, fake Trello) for schemathesis to call, with an
/// account whose Trello credentials the fake accepts. Prints `API_PORT TOKEN`, then runs until STOPFILE exists.
enum ChaosServe {
    static func run(stopFile: String) async throws {
        let stack = try await Stack()
        try await stack.startIngress()
        try await stack.startWorker(name: "w1", extra: Chaos.worker)
        try await stack.startAPI(bootstrapToken: Chaos.bootstrap)
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: Chaos.bootstrap)
        guard let token = created.json["auth_token"]?.stringValue else { throw StackError("account: \(created.body)") }
        let credentials = #"{"trello_api_key":"test-api-key","trello_token":"test-token","trello_webhook_secret":"\#(Chaos.secret)"}"#
        guard try await stack.callAPI(.PUT, "/dailyroundup/account", token: token, body: credentials).status == .ok else {
            throw StackError("could not set the account's Trello credentials")
        }
        FileHandle.standardOutput.write(Data("\(stack.apiPort) \(token)\n".utf8))
        while !FileManager.default.fileExists(atPath: stopFile) { try await Task.sleep(for: .milliseconds(200)) }
        let apiAlive = stack.api?.isRunning == true
        await stack.shutdown()
        FileHandle.standardOutput.write(Data("api-alive \(apiAlive)\n".utf8))
    }
}
