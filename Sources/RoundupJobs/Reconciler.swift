public import Foundation
public import Logging
import Metrics
import NIOCore
public import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams
public import RoundupTrello

/// The periodic delta pass that heals what webhooks missed, and the repair of the webhooks themselves.
/// For one list: check the list and board webhooks (missing, inactive or pointing at another callback URL → registered
/// again, Trello's HEAD check included), then page through the list's open cards and hand every card, plus a removal
/// for every card the store holds that Trello no longer shows in the list, to the same comparison webhooks go through —
/// so it emits exactly the changes webhooks would have, and nothing for a list in sync. One run per list at a time
/// across every worker (a lock in Redis).
public struct Reconciler: Sendable {
    public struct Outcome: Sendable, Equatable {
        public var cards = 0
        public var changes: [ChangeType: Int] = [:]
        public var webhooksRegistered = 0
        public var trelloRequests = 0
        /// The Trello list is archived: its pairing is paused, its cards left as they are.
        public var archived = false

        public var summary: [String: JSONValue] {
            [
                "cards": .number(Double(cards)),
                "changes": .object(Dictionary(uniqueKeysWithValues: changes.map { ($0.key.rawValue, JSONValue.number(Double($0.value))) })),
                "webhooks_registered": .number(Double(webhooksRegistered)), "archived": .bool(archived),
            ]
        }
    }

    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// Another run of this list holds the lock.
        case busy
        case noCredentials
        /// Trello says the token is not valid any more: the account is flagged, not retried.
        case tokenRevoked
        public var description: String {
            switch self {
            case .busy: return "another reconciliation of this list is running"
            case .noCredentials: return "the account has no Trello key and token"
            case .tokenRevoked: return "the account's Trello token was revoked"
            }
        }
    }

    public let store: any ReconcileStore & ListRepository & AccountRepository & ChangeFeed
    /// Mends the lists' webhooks at Trello; its client, Redis and logger serve the reconciliation too.
    let webhooks: WebhookRegistrar
    let pageSize: Int
    /// Our own writes in flight (a sync job between its Trello write and its bookkeeping) are not drift.
    let echo: EchoFingerprints?
    var trello: TrelloClient { webhooks.trello }
    public var redis: RedisClient { webhooks.callbacks.redis }
    public var keys: RedisKeys { webhooks.callbacks.keys }
    var logger: Logger { webhooks.logger }

    public init(
        store: any ReconcileStore & ListRepository & AccountRepository & ChangeFeed, trello: TrelloClient, redis: RedisClient, keys: RedisKeys,
        publicURL: String?, pageSize: Int = 1000,
        echo: EchoFingerprints? = nil, logger: Logger
    ) {
        self.echo = echo
        self.store = store
        self.webhooks = WebhookRegistrar(
            store: store, trello: trello, callbacks: WebhookCallbacks(publicURL: publicURL, redis: redis, keys: keys), logger: logger)
        self.pageSize = pageSize
    }

    static let release = RedisScript(
        name: "reconcile-unlock",
        source: """
            if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
            return 0
            """)

    /// Runs the list; waits up to `wait` for a run that holds the lock (an on-demand request behind a scheduled run).
    /// `skipIfReconciledWithin`: a scheduled run that finds the list done meanwhile (by another worker) does nothing.
    public func run(_ list: SyncListRecord, wait: Duration = .zero, skipIfReconciledWithin: TimeInterval? = nil) async throws -> Outcome {
        let lock = keys.prefix + "reconcile:lock:" + list.id
        let owner = UUID().uuidString
        let deadline = ContinuousClock.now + wait
        while true {
            let reply = try await redis.send(RedisCommand("SET", [RedisArgument(lock), RedisArgument(owner), "NX", "PX", "600000"]))
            if case .status = reply { break }
            guard ContinuousClock.now < deadline else { throw Failure.busy }
            try await Task.sleep(for: .milliseconds(250))
        }
        do {
            let outcome = try await locked(list, skipIfReconciledWithin: skipIfReconciledWithin)
            _ = try? await redis.evaluate(Self.release, keys: [RedisArgument(lock)], arguments: [RedisArgument(owner)], timeout: .seconds(2))
            return outcome
        } catch {
            _ = try? await redis.evaluate(Self.release, keys: [RedisArgument(lock)], arguments: [RedisArgument(owner)], timeout: .seconds(2))
            throw error
        }
    }

    private func locked(_ stale: SyncListRecord, skipIfReconciledWithin: TimeInterval?) async throws -> Outcome {
        // Read again under the lock: another worker may have just run it, or changed its webhook ids.
        guard let list = try await store.syncList(accountID: stale.accountID, id: stale.id) else { return Outcome() }
        if let window = skipIfReconciledWithin, let last = list.lastReconciledAt.flatMap(Timestamp.date), Date().timeIntervalSince(last) < window {
            return Outcome()
        }
        guard let account = try await store.account(id: list.accountID), let key = account.trelloAPIKey, let token = account.trelloToken else {
            try await store.markReconciled(syncListID: list.id, succeeded: false, error: Failure.noCredentials.description)
            throw Failure.noCredentials
        }
        let credentials = TrelloCredentials(apiKey: key, token: token)
        do {
            var outcome = Outcome()
            let list = try await follow(list, credentials: credentials)
            outcome.trelloRequests += 1
            if list.archived {
                // Paused: no card is read or removed (the archive removed none from the list), nothing is registered.
                outcome.archived = true
                try await store.markReconciled(syncListID: list.id, succeeded: true, error: nil)
                return outcome
            }
            outcome.webhooksRegistered = try await webhooks.repair(list, callbackToken: account.webhookToken, credentials: credentials)
            try await reconcileCards(list, credentials: credentials, outcome: &outcome)
            try await store.markReconciled(syncListID: list.id, succeeded: true, error: nil)
            Counter(label: "roundup_reconcile_runs_total", dimensions: [("result", "ok")]).increment()
            for (type, count) in outcome.changes where count > 0 {
                Counter(label: "roundup_reconcile_changes_total", dimensions: [("type", type.rawValue)]).increment(by: count)
            }
            logger.info(
                "list reconciled",
                metadata: [
                    "list": "\(list.id)", "cards": "\(outcome.cards)", "changes": "\(outcome.changes)",
                    "webhooks_registered": "\(outcome.webhooksRegistered)",
                ])
            return outcome
        } catch let error as TrelloError where error.kind == .tokenRejected {
            // Only if the token Trello refused is still the stored one (the user may have just sent a new one).
            let flagged = (try? await store.setNeedsAttention(accountID: list.accountID, reason: .trelloTokenRevoked, whileToken: token)) ?? false
            try? await store.markReconciled(syncListID: list.id, succeeded: false, error: Failure.tokenRevoked.description)
            Counter(label: "roundup_reconcile_runs_total", dimensions: [("result", "token_revoked")]).increment()
            if flagged {
                Counter(label: "roundup_trello_token_revoked_total").increment()
                _ = try? await redis.send(
                    .streamAppend(
                        keys.pushStream, maxLength: PushRequest.streamMaxLength,
                        fields: PushRequest(account: list.accountID, kind: .alert, reason: .trelloTokenRevoked).fields))
                logger.warning("trello token revoked; account flagged", metadata: ["account": "\(list.accountID)"])
            }
            throw Failure.tokenRevoked
        } catch {
            try? await store.markReconciled(syncListID: list.id, succeeded: false, error: "\(error)")
            Counter(label: "roundup_reconcile_runs_total", dimensions: [("result", "error")]).increment()
            throw error
        }
    }

    /// Reads the Trello list (one request) and keeps the pairing in step with it: a new name in Trello renames the sync
    /// list; an archived list pauses the pairing (`SyncListRecord.archivedAt`: no job runs against it, no reminder is
    /// deleted) and a restored one resumes it (this run then reconciles its cards). Either way the account's devices
    /// are woken (a push with reason `list_changed`, and their streams), so the apps read their lists again. A list
    /// Trello no longer shows is left to the card pass.
    func follow(_ list: SyncListRecord, credentials: TrelloCredentials) async throws -> SyncListRecord {
        guard let found = try await trello.list(id: list.trelloListID, credentials: credentials) else { return list }
        let renamed = list.trelloListName.map { $0 != found.name } ?? false
        let archivedAt = found.closed ? list.archivedAt ?? Timestamp.now() : nil
        guard renamed || list.trelloListName == nil || archivedAt != list.archivedAt else { return list }
        guard
            let updated = try await store.setTrelloListState(
                accountID: list.accountID, id: list.id, name: renamed ? found.name : nil, trelloListName: found.name, archivedAt: archivedAt)
        else { return list }
        let paused = archivedAt != nil && list.archivedAt == nil, resumed = archivedAt == nil && list.archivedAt != nil
        guard renamed || paused || resumed else { return updated }
        logger.info(
            "trello list changed", metadata: ["list": "\(list.id)", "renamed": "\(renamed)", "archived": "\(paused)", "restored": "\(resumed)"])
        Counter(label: "roundup_list_changes_total", dimensions: [("change", renamed ? "renamed" : paused ? "archived" : "restored")]).increment()
        do {
            _ = try await redis.pipeline(NewChanges.commands(account: list.accountID, reason: .listChanged, keys: keys), timeout: .seconds(2))
        } catch {
            logger.warning("devices not woken for a list change", metadata: ["list": "\(list.id)", "error": "\(error)"])
        }
        return updated
    }

    /// The most cards gone from a list one reconciliation looks for in the account's other synced lists.
    static let movedLookups = 20

    func reconcileCards(_ list: SyncListRecord, credentials: TrelloCredentials, outcome: inout Outcome) async throws {
        // Every observation is dated when the reading began: a webhook for a later edit still wins, and a card
        // created after the reading began is not taken for gone.
        let started = Date()
        // The board's Priority field as Trello has it now (one request beside the list's pages): an option added or
        // renamed since it was stored reaches the cards carrying it.
        let stored = try await store.priorityField(accountID: list.accountID, boardID: list.trelloBoardID)
        let priority = try await trello.priorityField(boardID: list.trelloBoardID, credentials: credentials) ?? stored
        if let priority, priority != stored {
            try await store.savePriorityField(accountID: list.accountID, boardID: list.trelloBoardID, field: priority)
        }
        var seen = Set<String>()
        var before: String?
        var observations: [CardObservation] = []
        while true {
            let page = try await trello.openCards(listID: list.trelloListID, before: before, limit: pageSize, credentials: credentials)
            for card in page {
                guard let id = card["id"]?.stringValue, card["idList"]?.stringValue ?? list.trelloListID == list.trelloListID else { continue }
                // A card the list's filter leaves out is as good as gone: a reminder it had is deleted.
                guard list.settings.filter.admits(CardFacts(card: card)) else { continue }
                seen.insert(id)
                observations.append(
                    CardObservation(
                        accountID: list.accountID, syncListID: list.id, cardID: id, actionID: nil, actionDate: started,
                        kind: .fields(CardMapper.fields(fromCard: card, priority: priority), full: true)))
            }
            outcome.trelloRequests += 1
            guard page.count == pageSize, let last = page.last?["id"]?.stringValue, last != before else { break }
            before = last
        }
        outcome.cards = seen.count
        let live = Set(try await store.liveCardIDs(accountID: list.accountID, syncListID: list.id))
        let missing = live.subtracting(seen).sorted()
        // A card gone from the list may have moved to another synced list of the account, its webhook not yet applied:
        // read where it is, so the apps get the move, not a delete the move's webhook (older than this reading) could
        // not undo. Up to `movedLookups` cards a run; past that (a list emptied at once) they are removed.
        var others: [String: SyncListRecord] = [:]
        if !missing.isEmpty, missing.count <= Self.movedLookups {
            for other in try await store.syncLists(accountID: list.accountID) where other.id != list.id { others[other.trelloListID] = other }
        }
        for id in missing {
            if !others.isEmpty, let card = try await trello.card(id: id, credentials: credentials), card["closed"]?.boolValue != true,
                let listID = card["idList"]?.stringValue, let other = others[listID], other.settings.filter.admits(CardFacts(card: card))
            {
                outcome.trelloRequests += 1
                let otherPriority =
                    other.trelloBoardID == list.trelloBoardID
                    ? priority : try await store.priorityField(accountID: list.accountID, boardID: other.trelloBoardID)
                observations.append(
                    CardObservation(
                        accountID: list.accountID, syncListID: other.id, cardID: id, actionID: nil, actionDate: started,
                        kind: .fields(CardMapper.fields(fromCard: card, priority: otherPriority), full: true)))
                continue
            }
            observations.append(
                CardObservation(accountID: list.accountID, syncListID: list.id, cardID: id, actionID: nil, actionDate: started, kind: .removed))
        }
        if let echo { observations = await echo.withoutEchoes(observations, logger: logger) { _, card in live.contains(card) } }
        var written = 0
        for start in stride(from: 0, to: observations.count, by: 500) {
            let applied = try await store.apply(Array(observations[start..<min(observations.count, start + 500)]))
            written += applied.written
            outcome.changes.merge(applied.types) { $0 + $1 }
        }
        if written > 0 {
            do {
                _ = try await redis.pipeline(NewChanges.commands(account: list.accountID, reason: .reconcile, keys: keys), timeout: .seconds(2))
            } catch {
                logger.warning("new changes not announced", metadata: ["account": "\(list.accountID)", "error": "\(error)"])
            }
        }
    }
}

extension Optional {
    func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        switch self {
        case .some(let value): return try await transform(value)
        case .none: return nil
        }
    }
}
