import Foundation
import Logging
import NIOConcurrencyHelpers
import RoundupCore
import RoundupStore
import RoundupSync
import Metrics
import RoundupTrello

/// Reads full cards and board custom fields from Trello. A protocol so the processor can be driven in
/// benchmarks and tests with the real client against a fake Trello server.
public protocol CardSource: Sendable {
    func card(id: String, credentials: TrelloCredentials) async throws -> [String: JSONValue]?
    func priorityField(boardID: String, credentials: TrelloCredentials) async throws -> PriorityField?
}

extension TrelloClient: CardSource {
    public func card(id: String, credentials: TrelloCredentials) async throws -> [String: JSONValue]? {
        try await card(id: id, credentials: TrelloCredentialsValue(apiKey: credentials.apiKey, token: credentials.token))
    }

    public func priorityField(boardID: String, credentials: TrelloCredentials) async throws -> PriorityField? {
        try await priorityField(boardID: boardID, credentials: TrelloCredentialsValue(apiKey: credentials.apiKey, token: credentials.token))
    }
}

/// The outcome of a batch: which entries are done (ack them), which failed and why.
public struct BatchOutcome: Sendable {
    public var done: [String] = []
    /// Worth retrying: left pending, reclaimed later, dead-lettered after too many deliveries.
    public var retry: [(id: String, error: String)] = []
    /// Will never succeed as it is (undecodable): dead-letter now.
    public var poison: [(id: String, error: String)] = []
    public var dropped = 0
    public var changesWritten = 0
    /// Accounts whose apps have new changes: each gets a background push.
    public var accountsWithChanges = Set<String>()
    /// Action type of each entry, for metrics by type.
    public var types: [String: String] = [:]
}

/// Turns a batch of webhook entries into pending changes: interpret, look up, fetch, apply in one transaction.
public final class WebhookProcessor: Sendable {
    let store: any SyncStore
    let cards: any CardSource
    let logger: Logger
    let fetchConcurrency: Int
    /// Fingerprints of our own writes to Trello; nil turns echo suppression by fingerprint off.
    let echo: EchoFingerprints?
    /// Boards whose Priority field was looked up recently (account/board → when).
    private let priorityChecked = NIOLockedValueBox([AccountScoped: Date]())

    /// A retry whose cause is the store being unreachable, busy or restarting, not the event. PostgreSQL's data and
    /// integrity errors (SQLSTATE classes 22 and 23) and statement errors (42) are the event's or a bug: those still
    /// count towards the dead letters.
    static func isStoreFailure(_ error: String) -> Bool {
        guard error.hasPrefix("store ") else { return false }
        return !["postgres 22", "postgres 23", "postgres 42"].contains { error.contains($0) }
    }

    public init(store: any SyncStore, cards: any CardSource, logger: Logger, fetchConcurrency: Int = 16, echo: EchoFingerprints? = nil) {
        self.echo = echo
        self.store = store
        self.cards = cards
        self.logger = logger
        self.fetchConcurrency = fetchConcurrency
    }

    private struct Parsed {
        var entry: StreamEntry
        var account: String
        var actionID: String?
        var date: Date
        var events: [CardEvent]
        var boardID: String?
    }

    private enum Plan {
        case apply(CardObservation)
        case fetch(account: String, cardID: String, boardID: String?, knownListID: String?)
    }

    public func process(_ entries: [StreamEntry]) async -> BatchOutcome {
        var outcome = BatchOutcome()
        var parsed: [Parsed] = []
        for entry in entries {
            guard let account = entry.string("account"), let body = entry.fields["body"] else {
                outcome.poison.append((entry.id, "entry has no account or body"))
                continue
            }
            let decoded: TrelloWebhookBody
            do {
                decoded = try TrelloWebhookBody.decode(body)
            } catch {
                outcome.poison.append((entry.id, "body does not decode: \(error)"))
                continue
            }
            let received = entry.string("received").flatMap(Double.init).map { Date(timeIntervalSince1970: $0 / 1000) } ?? Date()
            let date = decoded.action.date.flatMap(Timestamp.date) ?? received
            var events = CardEventInterpreter.events(for: decoded, actionType: entry.string("type"))
            if entry.string(WebhookCallback.confirmField) == "1" {
                // Not delivered to the account's own callback URL (`WebhookCallback`): trust no payload, read each card
                // from Trello with the account's credentials, so a forged body can change nothing the apps see.
                events = events.map { CardEvent(cardID: $0.cardID, listID: $0.listID, boardID: $0.boardID, kind: .fetch) }
            }
            outcome.types[entry.id] = entry.string("type") ?? decoded.action.type ?? "unknown"
            parsed.append(Parsed(entry: entry, account: account, actionID: entry.string("action") ?? decoded.action.id, date: date, events: events, boardID: decoded.action.data?.board?.id))
        }

        let lookups = parsed.flatMap { p in
            p.events.map { BatchLookup(accountID: p.account, cardID: $0.cardID, listIDs: $0.listID.map { [$0] } ?? [], boardID: $0.boardID ?? p.boardID) }
        }
        let firstContext: BatchContext
        do {
            firstContext = try await store.lookup(lookups)
        } catch {
            for p in parsed { outcome.retry.append((p.entry.id, "store lookup failed: \(error)")) }
            return outcome
        }

        var context = firstContext
        // Decide, per event, whether it can be applied as it is, needs the full card, or concerns no synced list.
        var plans: [[Plan]] = []
        var fetches: [AccountScoped: (boardID: String?, knownListID: String?)] = [:]
        for p in parsed {
            var entryPlans: [Plan] = []
            for event in p.events {
                let task = context.tasks[AccountScoped(p.account, event.cardID)]
                let liveTask = task.flatMap { $0.deleted ? nil : $0 }
                let list = event.listID.flatMap { context.lists[AccountScoped(p.account, $0)] }
                let board = event.boardID ?? p.boardID
                switch event.kind {
                case .removed:
                    guard let syncListID = list?.id ?? (event.listID == nil ? liveTask?.syncListID : nil) else { continue }
                    entryPlans.append(.apply(CardObservation(accountID: p.account, syncListID: syncListID, cardID: event.cardID, actionID: p.actionID, actionDate: p.date, kind: .removed)))
                case .fields(let fields):
                    // The list the payload names, or (when it names none) the one the card is known in.
                    let target = list?.id ?? (event.listID == nil ? liveTask?.syncListID : nil)
                    if let target, let liveTask, liveTask.syncListID == target {
                        entryPlans.append(.apply(CardObservation(accountID: p.account, syncListID: target, cardID: event.cardID, actionID: p.actionID, actionDate: p.date, kind: .fields(fields, full: false))))
                    } else if list != nil || liveTask != nil {
                        // A card we have not seen yet (or not in this list): read it whole.
                        entryPlans.append(.fetch(account: p.account, cardID: event.cardID, boardID: board, knownListID: liveTask?.syncListID))
                    }
                case .fetch:
                    let boardSynced = board.map { context.boards.contains(AccountScoped(p.account, $0)) } ?? false
                    let relevant = list != nil || liveTask != nil || (event.listID == nil && boardSynced)
                    guard relevant else { continue }
                    entryPlans.append(.fetch(account: p.account, cardID: event.cardID, boardID: board, knownListID: liveTask?.syncListID))
                }
            }
            for case .fetch(let account, let cardID, let boardID, let knownListID) in entryPlans {
                fetches[AccountScoped(account, cardID)] = (boardID, knownListID)
            }
            plans.append(entryPlans)
        }

        let fetched = await fetchCards(fetches, context: context)

        // A fetched card names its list; look up the lists the payloads did not name.
        let unknownLists = fetched.compactMap { key, result -> BatchLookup? in
            guard case .success(let card?) = result, let listID = card.listID,
                  context.lists[AccountScoped(key.accountID, listID)] == nil else { return nil }
            return BatchLookup(accountID: key.accountID, cardID: key.id, listIDs: [listID], boardID: nil)
        }
        if !unknownLists.isEmpty {
            do {
                let more = try await store.lookup(unknownLists)
                context.lists.merge(more.lists) { current, _ in current }
            } catch {
                for p in parsed { outcome.retry.append((p.entry.id, "store lookup failed: \(error)")) }
                return outcome
            }
        }

        // Build the observations of every entry that has all it needs.
        var observations: [CardObservation] = []
        var applied: [String] = []
        for (p, entryPlans) in zip(parsed, plans) {
            var entryObservations: [CardObservation] = []
            var failure: String?
            for plan in entryPlans {
                switch plan {
                case .apply(let observation):
                    entryObservations.append(observation)
                case .fetch(let account, let cardID, _, let knownListID):
                    switch fetched[AccountScoped(account, cardID)] {
                    case .failure(let error):
                        failure = "\(error)"
                    case .success(let result):
                        if let result {
                            let list = result.listID.flatMap { context.lists[AccountScoped(account, $0)] }
                            if let list, !result.closed {
                                entryObservations.append(CardObservation(accountID: account, syncListID: list.id, cardID: cardID, actionID: p.actionID, actionDate: p.date, kind: .fields(result.fields, full: true)))
                            } else if let knownListID {
                                entryObservations.append(CardObservation(accountID: account, syncListID: knownListID, cardID: cardID, actionID: p.actionID, actionDate: p.date, kind: .removed))
                            }
                        } else if let knownListID {
                            entryObservations.append(CardObservation(accountID: account, syncListID: knownListID, cardID: cardID, actionID: p.actionID, actionDate: p.date, kind: .removed))
                        }
                    case nil:
                        failure = "card \(cardID) was not fetched"
                    }
                }
            }
            if let failure {
                outcome.retry.append((p.entry.id, failure))
            } else if entryObservations.isEmpty {
                outcome.dropped += 1
                outcome.done.append(p.entry.id)
            } else {
                observations.append(contentsOf: entryObservations)
                applied.append(p.entry.id)
            }
        }

        if let echo, !observations.isEmpty {
            observations = await Self.withoutEchoes(observations, context: context, echo: echo, logger: logger)
        }

        var attempt = 0
        while true {
            attempt += 1
            do {
                let result = try await store.applyReportingAccounts(observations)
                outcome.changesWritten = result.written
                outcome.accountsWithChanges = result.accounts
                outcome.done.append(contentsOf: applied)
                break
            } catch {
                if attempt >= 3 {
                    logger.error("store write failed", metadata: ["error": "\(error)", "entries": "\(applied.count)"])
                    for id in applied { outcome.retry.append((id, "store write failed: \(error)")) }
                    break
                }
                try? await Task.sleep(for: .milliseconds(100 * attempt))
            }
        }
        return outcome
    }

    static func withoutEchoes(_ observations: [CardObservation], context: BatchContext, echo: EchoFingerprints, logger: Logger) async -> [CardObservation] {
        await echo.withoutEchoes(observations, logger: logger) { account, card in
            context.tasks[AccountScoped(account, card)].map { !$0.deleted } ?? false
        }
    }

    struct FetchedCard: Sendable {
        var fields: [String: JSONValue]
        var listID: String?
        var closed: Bool
    }

    private func fetchCards(
        _ wanted: [AccountScoped: (boardID: String?, knownListID: String?)], context: BatchContext
    ) async -> [AccountScoped: Result<FetchedCard?, TrelloFetchError>] {
        guard !wanted.isEmpty else { return [:] }
        var results: [AccountScoped: Result<FetchedCard?, TrelloFetchError>] = [:]
        var priorities: [AccountScoped: PriorityField] = context.priorityFields
        let items = Array(wanted)
        await withTaskGroup(of: (AccountScoped, Result<FetchedCard?, TrelloFetchError>, (AccountScoped, PriorityField)?).self) { group in
            var index = 0
            func addNext() {
                guard index < items.count else { return }
                let (key, info) = items[index]
                index += 1
                let credentials = context.credentials[key.accountID]
                let known = info.boardID.flatMap { priorities[AccountScoped(key.accountID, $0)] }
                group.addTask {
                    guard let credentials else {
                        return (key, .failure(TrelloFetchError(message: "account \(key.accountID) has no Trello key and token")), nil)
                    }
                    do {
                        guard let card = try await self.cards.card(id: key.id, credentials: credentials) else { return (key, .success(nil), nil) }
                        let board = card["idBoard"]?.stringValue ?? info.boardID
                        var priority = board.flatMap { _ in known }
                        var learned: (AccountScoped, PriorityField)?
                        if priority == nil, let board, self.shouldLookUpPriority(AccountScoped(key.accountID, board)) {
                            priority = try await self.cards.priorityField(boardID: board, credentials: credentials)
                            if let priority { learned = (AccountScoped(key.accountID, board), priority) }
                        }
                        let fields = CardMapper.fields(fromCard: card, priority: priority)
                        return (key, .success(FetchedCard(fields: fields, listID: card["idList"]?.stringValue, closed: card["closed"]?.boolValue ?? false)), learned)
                    } catch {
                        return (key, .failure(TrelloFetchError(message: "\(error)")), nil)
                    }
                }
            }
            for _ in 0..<min(fetchConcurrency, items.count) { addNext() }
            while let (key, result, learned) = await group.next() {
                results[key] = result
                if let (board, field) = learned, priorities[board] == nil {
                    priorities[board] = field
                    try? await store.savePriorityField(accountID: board.accountID, boardID: board.id, field: field)
                }
                addNext()
            }
        }
        return results
    }

    /// Boards without a Priority field are asked again at most every ten minutes.
    private func shouldLookUpPriority(_ board: AccountScoped) -> Bool {
        priorityChecked.withLockedValue { checked in
            if let last = checked[board], Date().timeIntervalSince(last) < 600 { return false }
            checked[board] = Date()
            return true
        }
    }
}

struct TrelloFetchError: Error, CustomStringConvertible, Sendable {
    var message: String
    var description: String { message }
}
