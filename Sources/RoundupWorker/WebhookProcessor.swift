import Foundation
public import Logging
import Metrics
import NIOConcurrencyHelpers
public import RoundupCore
public import RoundupJobs
import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams
public import RoundupTrello
import Tracing

/// Reads full cards and board custom fields from Trello. A protocol so the processor can be driven in
/// benchmarks and tests with the real client against a fake Trello server.
public protocol CardSource: Sendable {
    func card(id: String, credentials: TrelloCredentials) async throws -> [String: JSONValue]?
    func priorityField(boardID: String, credentials: TrelloCredentials) async throws -> PriorityField?
    /// One page of a list's open cards, each as `card(id:)` gives it, newest first (`before`: the last id of the page
    /// before). A list that no longer exists throws.
    func openCards(listID: String, before: String?, limit: Int, credentials: TrelloCredentials) async throws -> [[String: JSONValue]]
}

extension TrelloClient: CardSource {}

/// Turns a batch of webhook entries into pending changes: interpret, look up, fetch, apply in one transaction.
public final class WebhookProcessor: Sendable {
    let store: any ChangeFeed & ListRepository
    let cards: any CardSource
    let logger: Logger
    let fetchConcurrency: Int
    /// The longest a card read waits for its account's Trello rate limit (`TrelloWait`). Past it the entries that need
    /// the card are left in the stream (`EventFailure.trelloThrottled`) and the rest of the batch settles: an account
    /// whose token is throttled (by its own flood) holds back neither its lane's neighbours nor the next batches.
    let trelloWait: Duration
    /// This many wanted cards of one list in a batch are read with the list (`fetchCards`).
    let bulkReadThreshold: Int
    /// The most pages (of 1,000 cards) one bulk read takes.
    let bulkReadPages = 20
    /// How long a list read in bulk serves the next batches of a backlog (`ListSnapshot`).
    let snapshotLifetime: TimeInterval = 60
    /// The most cards the lists read in bulk keep, all lists together (the oldest reads are dropped first).
    let snapshotCardLimit = 20_000
    /// The lists read in bulk lately, by account and Trello list.
    private let snapshots = NIOLockedValueBox([AccountScoped: ListSnapshot]())
    /// A batch of several accounts is processed in up to this many lanes at once, each a group of whole accounts.
    let accountLanes: Int
    /// Fingerprints of our own writes to Trello; nil turns echo suppression by fingerprint off.
    let echo: EchoFingerprints?
    /// Accounts a card read found throttled lately (account → when): their cards are read one at a time, in order.
    private let throttledLately = NIOLockedValueBox([String: ContinuousClock.Instant]())
    /// Boards whose Priority field was looked up recently (account/board → when).
    private let priorityChecked = NIOLockedValueBox([AccountScoped: Date]())
    /// When each board's Priority field was last read again for an option it lacked (`shouldRereadPriority`).
    private let priorityReread = NIOLockedValueBox([AccountScoped: Date]())
    public init(
        store: any ChangeFeed & ListRepository, cards: any CardSource, logger: Logger, fetchConcurrency: Int = 16, accountLanes: Int = 1,
        echo: EchoFingerprints? = nil, bulkReadThreshold: Int = 10, trelloWait: Duration = .seconds(1)
    ) {
        self.trelloWait = trelloWait
        self.bulkReadThreshold = max(2, bulkReadThreshold)
        self.echo = echo
        self.store = store
        self.cards = cards
        self.logger = logger
        self.fetchConcurrency = fetchConcurrency
        self.accountLanes = max(1, accountLanes)
    }

    /// An entry as the batch reads it: its id on the stream and what it says.
    private typealias Parsed = Delivered<WebhookReading>

    /// Processes a batch. Entries of different accounts share nothing in the store (each write takes its accounts'
    /// locks), so a batch of several accounts runs in lanes of whole accounts at once (`accountLanes`): one lane's
    /// writes are in the database while another's entries are planned (with one batch at a time, the worker's and
    /// PostgreSQL's time added up). An account's entries stay in one lane, in their order.
    public func process(_ batch: [Delivered<WebhookReading>]) async -> BatchOutcome {
        let lanes = Self.lanes(batch, count: accountLanes) { $0.message.account }
        guard lanes.count > 1 else { return await process(batch, fetchedBefore: [:]) }
        return await withTaskGroup(of: BatchOutcome.self) { group in
            for lane in lanes {
                group.addTask { await self.process(lane, fetchedBefore: [:]) }
            }
            var outcome = BatchOutcome()
            for await part in group { outcome.merge(part) }
            return outcome
        }
    }

    /// `items` in at most `count` groups of whole accounts, each in the batch's order, the accounts spread so the
    /// groups' sizes are close.
    static func lanes<Item>(_ items: [Item], count: Int, account: (Item) -> String) -> [[Item]] {
        guard count > 1, items.count > 1 else { return [items] }
        var sizes: [String: Int] = [:]
        for item in items { sizes[account(item), default: 0] += 1 }
        guard sizes.count > 1 else { return [items] }
        // Largest accounts first, each to the lane holding the fewest entries so far (ties: the lower lane; accounts
        // of equal size in byte order, so the split does not depend on hashing).
        var load = [Int](repeating: 0, count: min(count, sizes.count))
        var laneOf: [String: Int] = [:]
        for (account, size) in sizes.sorted(by: { $0.value != $1.value ? $0.value > $1.value : $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) {
            let lane = load.indices.min { load[$0] < load[$1] }!
            laneOf[account] = lane
            load[lane] += size
        }
        var lanes = [[Item]](repeating: [], count: load.count)
        for item in items { lanes[laneOf[account(item)]!].append(item) }
        return lanes
    }

    /// What one entry says: its account, action, date and card events; an entry with no account or body, or a body
    /// that is not a Trello action, does not decode (the consumer dead-letters it). Depends on the entry alone: the
    /// consumer decodes a batch it read ahead while the batch before it is in the store (the JSON parse is about a
    /// sixth of the worker's instructions per event, and there it runs beside the store's round trips).
    public static func decode(_ entry: StreamDelivery) throws(StreamUndecodable) -> WebhookReading {
        guard let event = WebhookEvent(fields: entry.fields) else { throw StreamUndecodable("entry has no account or body") }
        let decoded: TrelloWebhookBody
        do {
            decoded = try TrelloWebhookBody.decode(event.body)
        } catch {
            throw StreamUndecodable("body does not decode: \(error)")
        }
        let received = event.receivedMilliseconds.map { Date(timeIntervalSince1970: Double($0) / 1000) } ?? Date()
        var date = decoded.action.date.flatMap(Timestamp.date) ?? received
        var events = CardEventInterpreter.events(for: decoded, actionType: event.type)
        if event.confirm {
            // Not delivered to the account's own callback URL (`WebhookCallback`): trust no payload, read each card
            // from Trello with the account's credentials, so a forged body can change nothing the apps see. Its date
            // is the sender's too: never later than its arrival, or a forged future date would stamp the card's
            // fields and make every real edit before it look older.
            events = events.map { CardEvent(cardID: $0.cardID, listID: $0.listID, boardID: $0.boardID, kind: .fetch) }
            date = min(date, received)
        }
        let type = event.type ?? decoded.action.type ?? "unknown"
        var reading = WebhookReading(
            account: event.account, type: type, actionID: event.actionID ?? decoded.action.id, date: date, events: events,
            boardID: decoded.action.data?.board?.id)
        if TrelloActionType.boardLabelChanges.contains(type), let board = reading.boardID, IdentifierShape.isTrelloID(board) {
            reading.labelsChangedOnBoard = board
        }
        reading.trace = event.trace
        return reading
    }

    /// `fetchedBefore`: cards this batch has already read from Trello (a part of a batch processed again after the store
    /// refused the whole), not read again.
    private func process(_ parsed: [Parsed], fetchedBefore: [AccountScoped: FetchedCard?]) async -> BatchOutcome {
        var outcome = BatchOutcome()
        for p in parsed {
            outcome.types[p.id] = p.type
            if let board = p.labelsChangedOnBoard { outcome.boardLabelChanges.insert(AccountScoped(p.account, board)) }
        }

        let lookups = parsed.flatMap { p in
            p.events.map {
                BatchLookup(accountID: p.account, cardID: $0.cardID, listIDs: $0.listID.map { [$0] } ?? [], boardID: $0.boardID ?? p.boardID)
            }
        }
        let firstContext: BatchContext
        do {
            firstContext = try await store.lookup(lookups)
        } catch {
            return await storeFailed(parsed, outcome: outcome, error: error, stage: "lookup", fetched: fetchedBefore)
        }

        var context = firstContext
        let fetches = BatchPlanner(context: context).reads(parsed)
        let fetched = await TrelloWait.$limit.withValue(trelloWait) { await fetchCards(fetches, context: context, known: fetchedBefore) }
        var fetchedCards = fetchedBefore
        for (key, result) in fetched {
            if case .success(let card) = result { fetchedCards.updateValue(card, forKey: key) }
        }

        // A fetched card names its list; look up the lists the payloads did not name.
        let unknownLists = fetched.compactMap { key, result -> BatchLookup? in
            guard case .success(let card?) = result, let listID = card.listID,
                context.lists[AccountScoped(key.accountID, listID)] == nil
            else { return nil }
            return BatchLookup(accountID: key.accountID, cardID: key.id, listIDs: [listID], boardID: nil)
        }
        if !unknownLists.isEmpty {
            do {
                let more = try await store.lookup(unknownLists)
                context.lists.merge(more.lists) { current, _ in current }
            } catch {
                return await storeFailed(parsed, outcome: outcome, error: error, stage: "lookup", fetched: fetchedCards)
            }
        }

        // The observations of every entry that has all it needs, now with what Trello said.
        let planned = BatchPlanner(context: context).observations(parsed, fetched: fetched)
        outcome.retry += planned.retry
        outcome.throttled.merge(planned.throttled) { current, _ in current }
        var observations = planned.observations
        let (applied, dropped) = (planned.applied, planned.dropped)

        if let echo, !observations.isEmpty {
            observations = await Self.withoutEchoes(observations, context: context, echo: echo, logger: logger)
        }

        return await write(
            observations, applied: applied, dropped: dropped, outcome: outcome, batch: parsed, fetched: fetchedCards)
    }

    /// Writes the batch's observations in one store transaction, three attempts at most. When the store refuses an
    /// entry's data the batch is split (`storeFailed`); when it keeps failing, the applied entries are retried later.
    private func write(
        _ observations: [CardObservation], applied: [String], dropped: [String], outcome: BatchOutcome, batch parsed: [Parsed],
        fetched fetchedCards: [AccountScoped: FetchedCard?]
    ) async -> BatchOutcome {
        var outcome = outcome
        var attempt = 0
        while true {
            attempt += 1
            do {
                var attributes = SpanAttributes()
                attributes["db.operation.name"] = "apply"
                attributes["roundup.observations"] = observations.count
                let result = try await RoundupTracing.withChildSpan("apply observations", ofKind: .client, attributes: attributes) {
                    try await store.apply(observations)
                }
                outcome.changesWritten = result.written
                outcome.accountsWithChanges = result.accounts
                outcome.dropped += dropped.count
                outcome.done.append(contentsOf: applied + dropped)
                outcome.applied.append(contentsOf: applied)
                return outcome
            } catch {
                if EventFailure(store: error) == .eventData {
                    // The entries dropped here are processed again too: they were planned as if the others applied.
                    let again = Set(applied + dropped)
                    return await storeFailed(
                        parsed.filter { again.contains($0.id) }, outcome: outcome, error: error, stage: "write", fetched: fetchedCards)
                }
                if attempt >= 3 {
                    logger.error("store write failed", metadata: ["error": "\(error)", "entries": "\(applied.count)"])
                    outcome.dropped += dropped.count
                    outcome.done.append(contentsOf: dropped)
                    for id in applied { outcome.retry.append((id, EntryError(EventFailure(store: error), "store write failed: \(error)"))) }
                    return outcome
                }
                try? await Task.sleep(for: .milliseconds(100 * attempt))
            }
        }
    }

    /// The store failed for `entries`. When it refused their data, the batch is split in two halves processed one after
    /// the other (in order, so the result is still that of processing the entries one by one), and so on, until the
    /// entries it refuses fail alone: only they count towards the dead letters, the others are applied once. Any other
    /// failure retries them all.
    private func storeFailed(
        _ entries: [Parsed], outcome: BatchOutcome, error: any Error, stage: String, fetched: [AccountScoped: FetchedCard?]
    ) async -> BatchOutcome {
        var outcome = outcome
        let failure = EventFailure(store: error)
        guard failure == .eventData, entries.count > 1 else {
            if failure == .eventData, let entry = entries.first {
                logger.warning("store refused an event's data", metadata: ["entry": "\(entry.id)", "stage": "\(stage)", "error": "\(error)"])
            }
            for entry in entries { outcome.retry.append((entry.id, EntryError(failure, "store \(stage) failed: \(error)"))) }
            return outcome
        }
        logger.debug("store refused a batch's data: splitting it", metadata: ["entries": "\(entries.count)", "stage": "\(stage)"])
        let half = entries.count / 2
        for part in [Array(entries[..<half]), Array(entries[half...])] {
            outcome.merge(await process(part, fetchedBefore: fetched))
        }
        return outcome
    }

    static func withoutEchoes(
        _ observations: [CardObservation], context: BatchContext, echo: EchoFingerprints, logger: Logger
    ) async -> [CardObservation] {
        await echo.withoutEchoes(observations, logger: logger) { account, card in
            context.tasks[AccountScoped(account, card)].map { !$0.deleted } ?? false
        }
    }

    struct FetchedCard: Sendable {
        var fields: [String: JSONValue]
        var listID: String?
        var closed: Bool
        /// What a list's filter asks of it.
        var facts: CardFacts
    }

    /// A list's open cards as one bulk read found them (`readList`), kept for the next batches of a backlog: the first
    /// batch of thousands of new cards reads the list once, and the batches after it take their cards from here instead
    /// of reading the list again (or each card alone).
    ///
    /// A card serves an event only if the read surely came after the event, so it holds what the event did (and maybe
    /// later edits, as a card read now would): the event (Trello's clock) is more than `clockMargin` older than the
    /// read began (ours). A card's `dateLastActivity` cannot tell: Trello sets it some milliseconds before the date of
    /// the action that moved it (53.305 against 53.359 in a real `updateCard` body). A later event, or one of the last
    /// seconds before the read, is read anew, as before: a backlog (minutes of outage, a full Redis) is what this serves.
    struct ListSnapshot: Sendable {
        var readAt: Date
        var cards: [String: FetchedCard]
        static let clockMargin: TimeInterval = 5

        func serves(eventDate: Date) -> Bool { eventDate <= readAt.addingTimeInterval(-Self.clockMargin) }
    }

    /// Reads the `wanted` cards from Trello, but those already `known`. Where `bulkReadThreshold` or more are of one
    /// synced list (a backlog of new cards, a list copied, an automation), the list's open cards are read instead, a
    /// thousand a request (at most `bulkReadPages` pages); a wanted card the list does not show is read on its own.
    private func fetchCards(
        _ wanted: [AccountScoped: FetchWant], context: BatchContext, known: [AccountScoped: FetchedCard?]
    ) async -> [AccountScoped: Result<FetchedCard?, TrelloFetchError>] {
        guard !wanted.isEmpty else { return [:] }
        var results: [AccountScoped: Result<FetchedCard?, TrelloFetchError>] = [:]
        var priorities: [AccountScoped: PriorityField] = context.priorityFields
        var pending: [AccountScoped: FetchWant] = [:]
        for (key, want) in wanted {
            if let card = known[key] { results[key] = .success(card) } else { pending[key] = want }
        }
        let kept = snapshots.withLockedValue { $0 }
        if !kept.isEmpty {
            var served = 0
            for (key, want) in pending {
                guard let list = want.list, let snapshot = kept[AccountScoped(key.accountID, list)],
                    -snapshot.readAt.timeIntervalSinceNow < snapshotLifetime, let card = snapshot.cards[key.id],
                    snapshot.serves(eventDate: want.latest)
                else { continue }
                results[key] = .success(card)
                pending[key] = nil
                served += 1
            }
            if served > 0 { Counter(label: "roundup_worker_list_snapshot_cards_total").increment(by: served) }
        }
        var byList: [AccountScoped: [AccountScoped]] = [:]
        for (key, want) in pending {
            guard let list = want.list, context.lists[AccountScoped(key.accountID, list)] != nil else { continue }
            byList[AccountScoped(key.accountID, list), default: []].append(key)
        }
        for (list, keys) in byList where keys.count >= bulkReadThreshold {
            guard let credentials = context.credentials[list.accountID] else { continue }
            let found = await readList(
                list, wanting: Set(keys.map(\.id)), board: pending[keys[0]]?.board, credentials: credentials, priorities: &priorities)
            for (cardID, card) in found {
                let key = AccountScoped(list.accountID, cardID)
                results[key] = .success(card)
                pending[key] = nil
            }
        }
        var items: [(AccountScoped, String?)] = []
        for (key, want) in pending.sorted(by: { $0.value.order < $1.value.order }) { items.append((key, want.board)) }
        // An account whose token ran out lately reads one card at a time, in order, so what its token allows goes to its
        // earliest entries (the ones its order lets through); once a read of an account is throttled in this batch, its
        // other cards are not asked for.
        let lately = throttledLately.withLockedValue { recent in
            recent = recent.filter { ContinuousClock.now - $0.value < .seconds(60) }
            return Set(recent.keys)
        }
        var waiting = items
        var inFlight: [String: Int] = [:]
        var stopped: [String: Duration] = [:]
        await withTaskGroup(of: (AccountScoped, Result<FetchedCard?, TrelloFetchError>, (AccountScoped, PriorityField)?).self) { group in
            func addNext() {
                // The first card in order whose account is not stopped, nor reading one at a time with a read out.
                guard
                    let i = waiting.firstIndex(where: { item in
                        let account = item.0.accountID
                        return stopped[account] == nil && !(lately.contains(account) && inFlight[account, default: 0] > 0)
                    })
                else { return }
                let (key, wantedBoard) = waiting.remove(at: i)
                inFlight[key.accountID, default: 0] += 1
                let credentials = context.credentials[key.accountID]
                let knownPriority = wantedBoard.flatMap { priorities[AccountScoped(key.accountID, $0)] }
                group.addTask {
                    guard let credentials else {
                        return (
                            key,
                            .failure(TrelloFetchError(failure: .trelloRejected, message: "account \(key.accountID) has no Trello key and token")), nil
                        )
                    }
                    do {
                        guard let card = try await self.cards.card(id: key.id, credentials: credentials) else { return (key, .success(nil), nil) }
                        let board = card["idBoard"]?.stringValue ?? wantedBoard
                        var priority = board.flatMap { _ in knownPriority }
                        var learned: (AccountScoped, PriorityField)?
                        if priority == nil, let board, self.shouldLookUpPriority(AccountScoped(key.accountID, board)) {
                            do {
                                priority = try await self.cards.priorityField(boardID: board, credentials: credentials)
                            } catch {
                                // Not known: the card is not mapped without it (the apps would read "no priority").
                                self.forgetPriorityLookup(AccountScoped(key.accountID, board))
                                throw error
                            }
                            if let priority { learned = (AccountScoped(key.accountID, board), priority) }
                        }
                        // An option the stored field lacks (added on the board since): the field is read again.
                        if let known = priority, let board, CardMapper.namesUnknownOption(card, priority: known),
                            self.shouldRereadPriority(AccountScoped(key.accountID, board)),
                            let fresh = try await self.cards.priorityField(boardID: board, credentials: credentials)
                        {
                            priority = fresh
                            learned = (AccountScoped(key.accountID, board), fresh)
                        }
                        let fields = CardMapper.fields(fromCard: card, priority: priority)
                        return (
                            key,
                            .success(
                                FetchedCard(
                                    fields: fields, listID: card["idList"]?.stringValue, closed: card["closed"]?.boolValue ?? false,
                                    facts: CardFacts(card: card))),
                            learned
                        )
                    } catch let error as TrelloThrottled {
                        return (key, .failure(TrelloFetchError(failure: .trelloThrottled, message: "\(error)", wait: error.wait)), nil)
                    } catch let error as TrelloError {
                        return (
                            key, .failure(TrelloFetchError(failure: error.isTransient ? .trelloTransient : .trelloRejected, message: "\(error)")), nil
                        )
                    } catch {
                        return (key, .failure(TrelloFetchError(failure: .trelloTransient, message: "\(error)")), nil)
                    }
                }
            }
            for _ in 0..<min(fetchConcurrency, items.count) { addNext() }
            while let (key, result, learned) = await group.next() {
                results[key] = result
                inFlight[key.accountID, default: 1] -= 1
                if case .failure(let error) = result, error.failure == .trelloThrottled {
                    stopped[key.accountID] = max(stopped[key.accountID] ?? .zero, error.wait ?? .seconds(1))
                    throttledLately.withLockedValue { $0[key.accountID] = .now }
                }
                if let (board, field) = learned, priorities[board] != field {
                    priorities[board] = field
                    try? await store.savePriorityField(accountID: board.accountID, boardID: board.id, field: field)
                }
                // Fill the free slots: a read finished, and a throttled account's cards may have stopped waiting.
                while inFlightTotal(inFlight) < fetchConcurrency {
                    let before = waiting.count
                    addNext()
                    if waiting.count == before { break }
                }
            }
        }
        // Cards never read: their account's token was throttled in this batch.
        for (key, _) in waiting {
            if let wait = stopped[key.accountID] {
                results[key] = .failure(TrelloFetchError(failure: .trelloThrottled, message: "the account's Trello token is throttled", wait: wait))
            }
        }
        return results
    }

    /// Reads a list's open cards, page by page, until every `wanting` card is found (or the list ends, or
    /// `bulkReadPages` pages were read). Returns the wanted cards found; a failed read returns what was found before it
    /// (the others are read on their own).
    private func readList(
        _ list: AccountScoped, wanting: Set<String>, board: String?, credentials: TrelloCredentials, priorities: inout [AccountScoped: PriorityField]
    ) async -> [String: FetchedCard] {
        var read: [String: FetchedCard] = [:]
        var foundCount = 0
        var before: String?
        let readAt = Date()
        do {
            for _ in 0..<bulkReadPages {
                let page = try await cards.openCards(listID: list.id, before: before, limit: 1000, credentials: credentials)
                for card in page {
                    guard let id = card["id"]?.stringValue else { continue }
                    let cardBoard = card["idBoard"]?.stringValue ?? board
                    var priority = cardBoard.flatMap { priorities[AccountScoped(list.accountID, $0)] }
                    if priority == nil, let cardBoard, shouldLookUpPriority(AccountScoped(list.accountID, cardBoard)) {
                        do {
                            priority = try await cards.priorityField(boardID: cardBoard, credentials: credentials)
                        } catch {
                            forgetPriorityLookup(AccountScoped(list.accountID, cardBoard))
                            throw error
                        }
                        if let priority {
                            priorities[AccountScoped(list.accountID, cardBoard)] = priority
                            try? await store.savePriorityField(accountID: list.accountID, boardID: cardBoard, field: priority)
                        }
                    }
                    if let known = priority, let cardBoard, CardMapper.namesUnknownOption(card, priority: known),
                        shouldRereadPriority(AccountScoped(list.accountID, cardBoard)),
                        let fresh = try await cards.priorityField(boardID: cardBoard, credentials: credentials)
                    {
                        // An option added on the board since the field was read.
                        priority = fresh
                        priorities[AccountScoped(list.accountID, cardBoard)] = fresh
                        try? await store.savePriorityField(accountID: list.accountID, boardID: cardBoard, field: fresh)
                    }
                    if wanting.contains(id) { foundCount += 1 }
                    read[id] = FetchedCard(
                        fields: CardMapper.fields(fromCard: card, priority: priority), listID: card["idList"]?.stringValue,
                        closed: card["closed"]?.boolValue ?? false, facts: CardFacts(card: card))
                }
                Counter(label: "roundup_worker_list_reads_total").increment()
                guard foundCount < wanting.count, page.count == 1000, let last = page.last?["id"]?.stringValue else { break }
                before = last
            }
        } catch {
            logger.info("list read failed; its cards are read one by one", metadata: ["list": "\(list.id)", "error": "\(error)"])
        }
        keep(ListSnapshot(readAt: readAt, cards: read), of: list)
        return read.filter { wanting.contains($0.key) }
    }

    /// Keeps a list's bulk read for the next batches, within `snapshotCardLimit` cards for every list together (expired
    /// reads go first, then the oldest).
    private func keep(_ snapshot: ListSnapshot, of list: AccountScoped) {
        guard !snapshot.cards.isEmpty, snapshot.cards.count <= snapshotCardLimit else { return }
        snapshots.withLockedValue { kept in
            kept[list] = snapshot
            kept = kept.filter { -$0.value.readAt.timeIntervalSinceNow < snapshotLifetime }
            var total = kept.values.reduce(0) { $0 + $1.cards.count }
            for (key, old) in kept.sorted(by: { $0.value.readAt < $1.value.readAt }) where total > snapshotCardLimit && key != list {
                kept[key] = nil
                total -= old.cards.count
            }
        }
    }

    /// A lookup that failed: the board is asked again at its next card.
    private func forgetPriorityLookup(_ board: AccountScoped) {
        _ = priorityChecked.withLockedValue { $0.removeValue(forKey: board) }
    }

    /// A board whose cards name an option its stored Priority field lacks is read again at most once a minute (a card
    /// holding an option deleted since would otherwise ask at every read).
    private func shouldRereadPriority(_ board: AccountScoped) -> Bool {
        priorityReread.withLockedValue { reread in
            if let last = reread[board], Date().timeIntervalSince(last) < 60 { return false }
            reread[board] = Date()
            return true
        }
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
    var failure: EventFailure
    var message: String
    /// When throttled: how long the account's token must wait.
    var wait: Duration? = nil
    var description: String { message }
}

/// The reads in flight, all accounts together.
private func inFlightTotal(_ inFlight: [String: Int]) -> Int { inFlight.values.reduce(0, +) }
