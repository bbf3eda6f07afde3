import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import RoundupTrello
import RoundupWorker
import Testing

@testable import RoundupJobs

/// One step of a race over a card: a person's edit in Trello (its webhook waits in the stream: the worker is down), or
/// the app's edit of its reminder, synced at once (a sync job run by the real `SyncEngine` against the card in Trello).
enum RaceStep: Equatable, CustomStringConvertible {
    case rename(String), notes(String), complete(Bool), archive, unarchive
    case appTitle(String), appNotes(String), appComplete(Bool)
    /// The worker comes back: what waits in the stream is processed, and the app pulls and acks what it then has.
    case drain

    var description: String {
        switch self {
        case .rename(let n): "rename(\(n))"
        case .notes(let n): "notes(\(n))"
        case .complete(let c): "complete(\(c))"
        case .archive: "archive"
        case .unarchive: "unarchive"
        case .appTitle(let n): "appTitle(\(n))"
        case .appNotes(let n): "appNotes(\(n))"
        case .appComplete(let c): "appComplete(\(c))"
        case .drain: "drain"
        }
    }
}

/// A reminder as the app holds it.
struct AppReminder: Equatable, CustomStringConvertible {
    var title: String
    var notes: String
    var completed: Bool
    var description: String { "\(title)|\(notes)|\(completed)" }
}

/// Two sides, each a fresh store (account under `lww`, list L1 on board B1), its own fake Trello, a sync engine and an
/// app. The same steps are played on both; the webhooks each Trello sends are captured, and when the worker comes back
/// (`RaceStep.drain`) they are processed as one batch on the first side and one at a time on the second. What the
/// apps are sent is compared after each drain, and at the end each side's app is compared with its Trello.
final class RaceHarness: @unchecked Sendable {
    // @unchecked: used from one test task at a time.
    final class Side: @unchecked Sendable {
        let fixture: StoreFixture
        let trello: FakeTrello
        let capture: SimpleHTTPServer
        let captured: NIOLockedValueBox<[[UInt8]]>
        let processor: WebhookProcessor
        let engine: SyncEngine
        /// The app's reminders, by card.
        var reminders: [String: AppReminder] = [:]
        var entry = 0

        init(_ backend: StoreBackend, http: HTTPClient, redis: TestRedis, logger: Logger) async throws {
            fixture = try await StoreFixture(backend, listID: "L1", boardID: "B1")
            _ = try await fixture.store.updateAccount(id: fixture.account, AccountUpdate(conflictPolicy: .lww))
            trello = try await FakeTrello.start()
            let box = NIOLockedValueBox<[[UInt8]]>([])
            captured = box
            capture = try await SimpleHTTPServer.start(host: "127.0.0.1", port: 0) { request in
                if request.method == .POST { box.withLockedValue { $0.append(Array(request.body.readableBytesView)) } }
                return .text(.ok, "")
            }
            let client = TrelloClient(baseURL: trello.baseURL, http: http, logger: logger)
            _ = try await client.createWebhook(
                callbackURL: "http://127.0.0.1:\(capture.port)/hook", modelID: "B1", description: "race",
                credentials: TrelloCredentials(apiKey: "test-api-key", token: "test-token"))
            let echo = EchoFingerprints(redis: redis.client, keys: redis.keys, ttlSeconds: 120)
            processor = WebhookProcessor(store: fixture.store, cards: client, logger: logger, echo: echo)
            engine = SyncEngine(
                options: .init(keys: redis.keys, staleAfter: 60, heartbeat: .seconds(5)), store: fixture.store, trello: client, echo: echo,
                redis: redis.client, logger: logger)
        }

        /// The webhooks Trello sent since the last call, as the ingress enqueues them.
        func takeEntries() async -> [StreamEntry] {
            // Every delivery under way done (polled more often than `waitForWebhookDeliveries` does: hundreds of seeds wait here).
            let deadline = ContinuousClock.now + .seconds(10)
            while trello.state.withLockedValue({ $0.webhooksInFlight }) > 0, ContinuousClock.now < deadline {
                try? await Task.sleep(for: .milliseconds(1))
            }
            let bodies = captured.withLockedValue { bodies in
                defer { bodies = [] }
                return bodies
            }
            return bodies.map { body in
                entry += 1
                let json = (try? JSONParser.parse(body)) ?? .null
                let action = json["action"]?["id"]?.stringValue ?? "none"
                let type = json["action"]?["type"]?.stringValue ?? "unknown"
                return StreamEntry(
                    id: "\(entry)-0",
                    fields: [
                        "account": Array(fixture.account.utf8), "action": Array(action.utf8), "type": Array(type.utf8), "body": body,
                    ])
            }
        }

        /// The app's edit, synced as a job of one item; returns the item's status (or why there was none).
        func appEdit(card: String, field: SyncField, value: JSONValue, at modified: Date) async throws -> String {
            guard var reminder = reminders[card] else { return "no reminder" }
            switch field {
            case .title: reminder.title = value.stringValue ?? ""
            case .notes: reminder.notes = value.stringValue ?? ""
            default: reminder.completed = value.boolValue ?? false
            }
            reminders[card] = reminder
            let item = SyncItem(
                op: .update, syncListID: fixture.list.id, reminderID: "rem-\(card)", trelloCardID: card, fields: [field.rawValue: value],
                changedFields: [field.rawValue], modifiedAt: modified)
            // The item as a sync job runs it (`SyncEngine.process`), without the job's own bookkeeping: hundreds of
            // seeds sync here, and on PostgreSQL the lease, heartbeat and results were most of each seed's time.
            var state = try await engine.makeState(accountID: fixture.account, jobID: nil)
            do {
                let result = try await engine.process(item, state: &state)
                return "\(result.status)"
            } catch {
                return "failed: \(error)"
            }
        }

        /// The app pulls every change, applies it, and acks them all (a create with its reminder).
        func pull() async throws {
            let changes = try await fixture.changes()
            var acks: [ChangeAck] = []
            for change in changes {
                let card = change.trelloCardID
                let fields = change.fields
                switch change.changeType {
                case .delete:
                    reminders[card] = nil
                case .create:
                    reminders[card] = AppReminder(
                        title: fields[.title]?.stringValue ?? "", notes: fields[.notes]?.stringValue ?? "",
                        completed: fields[.completed]?.boolValue ?? false)
                case .update, .complete, .move:
                    guard var reminder = reminders[card] else { continue }
                    if let title = fields[.title]?.stringValue { reminder.title = title }
                    if let notes = fields[.notes]?.stringValue { reminder.notes = notes }
                    if let completed = fields[.completed]?.boolValue { reminder.completed = completed }
                    reminders[card] = reminder
                }
                acks.append(ChangeAck(id: change.id, reminderID: change.changeType == .create ? "rem-\(card)" : nil))
            }
            guard !acks.isEmpty else { return }
            let acked = try await fixture.store.acknowledge(accountID: fixture.account, acks: acks)
            #expect(acked == .acked(acks.map(\.id)), "\(acked)")
        }

        /// What the apps are sent of each card (type, changed fields, values), then the card's task.
        func seen(cards: [String]) async throws -> [String: [String]] {
            let changes = try await fixture.changes()
            let tasks = try await fixture.store.lookup(cards.map { BatchLookup(accountID: fixture.account, cardID: $0, listIDs: [], boardID: nil) })
                .tasks
            var seen: [String: [String]] = [:]
            for card in cards {
                var lines = changes.filter { $0.trelloCardID == card }.map { change in
                    let fields = change.fields
                    let shown = [SyncField.title, .notes, .completed].compactMap { f in fields[f].map { "\(f)=\($0.canonicalJSON)" } }
                    return
                        "\(change.changeType) \(change.changedFields.filter { ["title", "notes", "completed"].contains($0) }) \(shown.joined(separator: " "))"
                }
                let task = tasks[AccountScoped(fixture.account, card)]
                lines.append(task.map { "task \($0.deleted ? "deleted" : "live")" } ?? "no task")
                seen[card] = lines
            }
            return seen
        }

        /// Where the app and Trello disagree about `card`, if they do.
        func disagreement(card: String) -> String? {
            let trelloCard = trello.cardValue(card)
            let live = trelloCard.map { $0["closed"]?.boolValue != true && $0["idList"]?.stringValue == "L1" } ?? false
            let reminder = reminders[card]
            guard live, let trelloCard else {
                return reminder.map { "Trello has no live card, the app holds \($0)" }
            }
            let held = AppReminder(
                title: trelloCard["name"]?.stringValue ?? "", notes: trelloCard["desc"]?.stringValue ?? "",
                completed: trelloCard["dueComplete"]?.boolValue ?? false)
            guard let reminder else { return "Trello holds \(held), the app has no reminder" }
            return reminder == held ? nil : "Trello holds \(held), the app holds \(reminder)"
        }

        func shutdown() async {
            await trello.stop()
            await capture.stop()
        }
    }

    let http: HTTPClient
    let redis: TestRedis
    /// The first side processes each drain as one batch, the second one entry at a time.
    let batch: Side
    let single: Side

    init(_ backend: StoreBackend) async throws {
        http = HTTPClient(eventLoopGroupProvider: .singleton)
        redis = try await TestRedis.make()
        var logger = Logger(label: "race")
        logger.logLevel = .critical
        batch = try await Side(backend, http: http, redis: redis, logger: logger)
        single = try await Side(backend, http: http, redis: redis, logger: logger)
    }

    func shutdown() async throws {
        await batch.shutdown()
        await single.shutdown()
        await redis.shutdown()
        try await http.shutdown()
    }

    /// What a run found: per drain, cards whose changes differ between batch and one by one; at the end, cards whose
    /// app and Trello disagree on a side. Empty when all is well. `log` is what happened, for the report.
    struct Findings {
        var problems: [String] = []
        var log: [String] = []
    }

    /// Until the clock has passed both fakes' last action dates: a burst of Trello actions dates them a millisecond
    /// apart, which can run ahead of the clock, and the app's edit that follows them in the schedule must be later
    /// than they are on both sides alike (else one side sees it as older than a Trello action it followed).
    func afterTrello() async throws {
        let last = [batch, single].map { side in side.trello.state.withLockedValue { $0.lastActionDate } }.max() ?? .distantPast
        while Date() <= last.addingTimeInterval(0.001) { try await Task.sleep(for: .milliseconds(1)) }
    }

    /// Plays `steps` (card, step) on both sides, from each card live in L1 and known to the app.
    func run(cards: [String], steps: [(String, RaceStep)]) async throws -> Findings {
        var findings = Findings()
        for side in [batch, single] {
            for card in cards {
                let value = FakeTrello.card(id: card, listID: "L1", boardID: "B1", name: "start \(card)")
                side.trello.setCard(value)
                _ = try await side.fixture.store.apply([
                    CardObservation(
                        accountID: side.fixture.account, syncListID: side.fixture.list.id, cardID: card, actionID: nil,
                        actionDate: Date().addingTimeInterval(-100), kind: .fields(CardMapper.fields(fromCard: value), full: true))
                ])
            }
            try await side.pull()
        }
        var drains = 0
        for (card, step) in steps + [("", .drain)] {
            switch step {
            case .drain:
                drains += 1
                let whole = try await batch.processor.process(entries: await batch.takeEntries())
                #expect(whole.retry.isEmpty, "\(whole.retry)")
                for entry in await single.takeEntries() {
                    let one = try await single.processor.process(entries: [entry])
                    #expect(one.retry.isEmpty, "\(one.retry)")
                }
                let (b, s) = (try await batch.seen(cards: cards), try await single.seen(cards: cards))
                for card in cards where b[card] != s[card] {
                    findings.problems.append("drain \(drains) \(card): as one batch \(b[card] ?? []) ≠ one by one \(s[card] ?? [])")
                }
                try await batch.pull()
                try await single.pull()
                let held = { (side: Side) in cards.map { "\(side.reminders[$0].map { "\($0)" } ?? "none")" } }
                findings.log.append("drain \(drains): the app holds \(held(batch)) (batch), \(held(single)) (one by one)")
            case .rename(let name):
                for side in [batch, single] { side.trello.userUpdateCard(id: card, ["name": .string(name)]) }
                findings.log.append("\(card) \(step)")
            case .notes(let notes):
                for side in [batch, single] { side.trello.userUpdateCard(id: card, ["desc": .string(notes)]) }
                findings.log.append("\(card) \(step)")
            case .complete(let completed):
                for side in [batch, single] { side.trello.userUpdateCard(id: card, ["dueComplete": .bool(completed)]) }
                findings.log.append("\(card) \(step)")
            case .archive, .unarchive:
                for side in [batch, single] { side.trello.userUpdateCard(id: card, ["closed": .bool(step == .archive)]) }
                findings.log.append("\(card) \(step)")
            case .appTitle(let value), .appNotes(let value):
                try await afterTrello()
                let modified = Date()
                let field: SyncField = if case .appTitle = step { .title } else { .notes }
                let b = try await batch.appEdit(card: card, field: field, value: .string(value), at: modified)
                let s = try await single.appEdit(card: card, field: field, value: .string(value), at: modified)
                findings.log.append("\(card) \(step) → \(b) / \(s)")
                if b.hasPrefix("failed") || s.hasPrefix("failed") { findings.problems.append("\(card) \(step) → \(b) / \(s)") }
            case .appComplete(let completed):
                try await afterTrello()
                let modified = Date()
                let b = try await batch.appEdit(card: card, field: .completed, value: .bool(completed), at: modified)
                let s = try await single.appEdit(card: card, field: .completed, value: .bool(completed), at: modified)
                findings.log.append("\(card) \(step) → \(b) / \(s)")
                if b.hasPrefix("failed") || s.hasPrefix("failed") { findings.problems.append("\(card) \(step) → \(b) / \(s)") }
            }
        }
        for (name, side) in [("batch", batch), ("one by one", single)] {
            for card in cards {
                if let problem = side.disagreement(card: card) { findings.problems.append("\(name) \(card) apart: \(problem)") }
            }
        }
        return findings
    }

    /// A seed's steps over `cardCount` cards: bursts of archive/unarchive toggles, Trello edits of the title, notes and
    /// completion (of an archived card too), and the app's edits between them, with the worker down between drains.
    static func steps(seed: UInt64, cards: [String]) -> [(String, RaceStep)] {
        var rng = SplitMix64(seed: seed)
        var closed = Set<String>()
        var steps: [(String, RaceStep)] = []
        let count = Int.random(in: 6...14, using: &rng)
        for index in 0..<count {
            let card = cards[Int.random(in: 0..<cards.count, using: &rng)]
            let tag = "\(seed)-\(index)"
            switch Int.random(in: 0..<12, using: &rng) {
            case 0...2:
                // A toggle, sometimes two at once (archive and back, or back and archive again).
                for _ in 0..<Int.random(in: 1...2, using: &rng) {
                    steps.append((card, closed.contains(card) ? .unarchive : .archive))
                    if closed.contains(card) { closed.remove(card) } else { closed.insert(card) }
                }
            case 3: steps.append((card, .rename("t\(tag)")))
            case 4: steps.append((card, .notes("tn\(tag)")))
            case 5: steps.append((card, .complete(Bool.random(using: &rng))))
            case 6, 7: steps.append((card, .appTitle("a\(tag)")))
            case 8: steps.append((card, .appNotes("an\(tag)")))
            case 9: steps.append((card, .appComplete(Bool.random(using: &rng))))
            default: steps.append((card, .drain))
            }
        }
        return steps
    }
}
