public import Foundation
public import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams
public import RoundupTrello
import ServiceLifecycle

/// What the API takes of the store (it serves every resource and queues reconciliations).
public typealias OutboundStore = SyncStore & SyncJobStore & ReconcileStore & ActivityRepository
/// What the sync engine takes: accounts and lists to write to, the change feed (a Trello value kept before its webhook
/// reaches the apps), jobs, card state and resolutions; no devices, maintenance or reconciliation.
public typealias SyncEngineStore = AccountRepository & ListRepository & ChangeFeed & JobRepository & CardStateRepository & ResolutionRepository

/// An item that cannot succeed as it is: reported in the item's result, never retried.
struct ItemFailure: Error, CustomStringConvertible {
    var description: String
}

/// Applies the apps' edits to Trello: the items of sync jobs, imports, and the resolution of conflicts and
/// duplicates. Every write is fingerprinted before it is sent (echo suppression) and its values' hashes are
/// stamped in the store after, in one transaction with the job's bookkeeping.
public struct SyncEngine: Sendable {
    public struct Options: Sendable {
        public var keys: RedisKeys
        public var staleAfter: TimeInterval
        public var heartbeat: Duration
        /// Attempts of one item when Trello or the store fail transiently (429, 5xx, timeouts, busy).
        public var itemAttempts: Int = 6
        /// A sync job that has run this long gives its turn back after its current item while jobs of other accounts
        /// wait for a worker (`run`'s `othersWaiting`): slots are shared by turns, not held by the longest jobs.
        public var turn: Duration
        public init(keys: RedisKeys, staleAfter: TimeInterval, heartbeat: Duration, turn: Duration = .seconds(10)) {
            self.turn = turn
            self.keys = keys
            self.staleAfter = staleAfter
            self.heartbeat = heartbeat
        }
    }

    let options: Options
    let store: any SyncEngineStore
    let trello: TrelloClient
    let echo: EchoFingerprints
    let redis: RedisClient
    let logger: Logger
    /// Runs `reconcile` jobs (nil: such jobs fail saying so).
    let reconciler: Reconciler?

    public init(
        options: Options, store: any SyncEngineStore, trello: TrelloClient, echo: EchoFingerprints, redis: RedisClient, reconciler: Reconciler? = nil,
        logger: Logger
    ) {
        self.reconciler = reconciler
        self.options = options
        self.store = store
        self.trello = trello
        self.echo = echo
        self.redis = redis
        self.logger = logger
    }

    /// What one job knows while it runs.
    struct JobState {
        var jobID: String?
        /// The device whose sync this is: it already has its own values and gets no push for them.
        var deviceID: String? = nil
        var credentials: TrelloCredentials
        var policy: ConflictPolicy
        var deleteMode: DeleteMode
        /// Where the account's all-day dates are written (`AccountDetails.timeZone`).
        var timeZone: AccountTimeZone = .utc
        var lists: [String: SyncListRecord]
        var priority: [String: PriorityField?] = [:]
        /// Board id → its labels, read when an app names a label its card does not carry.
        var labels: [String: [[String: JSONValue]]] = [:]
        var openCards: [String: [[String: JSONValue]]] = [:]
        /// The item being processed (its index in the job), so what a failed attempt made survives its retry.
        var item = -1
        /// What the item's attempts made in Trello, by step (`item|field|ordinal` → the id Trello gave): a retry does not
        /// make a checklist, check item or link twice.
        var made: [String: String] = [:]
        /// Fields an attempt of the item began writing (`item|field`): on its retry, the card's value is partly ours, not
        /// a Trello edit to weigh against the app's.
        var begun: Set<String> = []
        /// The all-day dates of the item being processed: written with the item's own store write, for the fields the
        /// card ends up holding the app's value of.
        var days = DayDates()
        /// What the item being processed left on the card that the app did not send (`SyncItemResult.fields`).
        var told: [String: JSONValue] = [:]
    }

    public enum RunOutcome: Sendable, Equatable {
        case completed
        case failed(String)
        /// The job was given up as stale while it ran (its heartbeat could not be written in time).
        case lost
        /// Shutting down: the job stays running; another worker resumes it from `processed`.
        case interrupted
        /// Its turn was over while other jobs waited: it is queued again (`JobRepository.yieldJob`) and resumes from
        /// `processed` when a worker starts it next; the caller queues its entry again, behind the others.
        case yielded
    }

    // MARK: Running a job

    /// Runs a job from where it stands (`processed`), with a heartbeat beside it. `beat` runs with each heartbeat
    /// (the consumer keeps its stream entry from looking idle). `othersWaiting` says whether jobs wait for a worker:
    /// asked (at most once a second) after each item once the job has run `Options.turn`; when it says so the job
    /// yields.
    public func run(
        _ job: SyncJob, holder: String, beat: @escaping @Sendable () async -> Void = {}, othersWaiting: (@Sendable () async -> Bool)? = nil
    ) async -> RunOutcome {
        let lost = NIOLockedValueBox(false)
        let outcome: RunOutcome = await withTaskGroup(of: Void.self) { group in
            group.addTask {
                while !Task.isCancelled {
                    try? await Task.sleep(for: self.options.heartbeat)
                    if Task.isCancelled { return }
                    do {
                        if try await !self.store.heartbeat(jobID: job.id, holder: holder, staleAfter: self.options.staleAfter) {
                            lost.withLockedValue { $0 = true }
                            return
                        }
                    } catch {
                        self.logger.warning("job heartbeat failed", metadata: ["job": "\(job.id)", "error": "\(error)"])
                    }
                    await beat()
                }
            }
            let outcome = await self.work(job, holder: holder, lost: lost, othersWaiting: othersWaiting)
            group.cancelAll()
            return outcome
        }
        switch outcome {
        case .yielded:
            do {
                // No longer this holder's (given up as stale meanwhile): lost.
                if try await !store.yieldJob(jobID: job.id, holder: holder, staleAfter: options.staleAfter) {
                    logger.info("job ended", metadata: ["job": "\(job.id)", "kind": "\(job.kind.rawValue)", "outcome": "lost"])
                    return .lost
                }
            } catch {
                // Still running under this holder: its entry is reclaimed and it resumes, as after a shutdown.
                logger.warning("job could not yield; it will be resumed", metadata: ["job": "\(job.id)", "error": "\(error)"])
                return .interrupted
            }
            Counter(label: "roundup_sync_jobs_yielded_total").increment()
            logger.info("job yielded its turn", metadata: ["job": "\(job.id)", "from_item": "\(job.processed)"])
            return .yielded
        case .completed:
            try? await store.finishJob(jobID: job.id, status: .completed, error: nil)
            Counter(label: "roundup_sync_jobs_total", dimensions: [("kind", job.kind.rawValue), ("status", JobOutcome.completed.rawValue)])
                .increment()
        case .failed(let message):
            try? await store.finishJob(jobID: job.id, status: .error, error: message)
            Counter(label: "roundup_sync_jobs_total", dimensions: [("kind", job.kind.rawValue), ("status", JobOutcome.error.rawValue)]).increment()
        case .lost:
            Counter(label: "roundup_sync_jobs_total", dimensions: [("kind", job.kind.rawValue), ("status", JobOutcome.stale.rawValue)]).increment()
        case .interrupted:
            break
        }
        logger.info("job ended", metadata: ["job": "\(job.id)", "kind": "\(job.kind.rawValue)", "outcome": "\(outcome)"])
        return outcome
    }

    private func work(
        _ job: SyncJob, holder: String, lost: NIOLockedValueBox<Bool>, othersWaiting: (@Sendable () async -> Bool)?
    ) async -> RunOutcome {
        if job.kind == .reconcile { return await runReconcile(job, holder: holder) }
        var state: JobState
        do {
            state = try await makeState(accountID: job.accountID, jobID: job.id)
            state.deviceID = job.deviceID
        } catch let failure as ItemFailure {
            return .failed(failure.description)
        } catch {
            return .failed("the store could not be read: \(error)")
        }
        var running = state
        if job.kind == .import { return await runImport(job, holder: holder, state: &running, lost: lost) }
        if job.kind == .migrateLinks { return await runMigrateLinks(job, holder: holder, state: &running, lost: lost) }
        let items: [SyncItem]
        do {
            items = try job.syncItems()
        } catch {
            // Never "no items": the job ends `error`, logged and counted (roundup_sync_jobs_total{status="error"}).
            logger.error("job payload unreadable", metadata: ["job": "\(job.id)", "account": "\(job.accountID)", "error": "\(error)"])
            return .failed("\(error)")
        }
        // A stored count past the items (a payload edited by hand, say) is the end, not a trap.
        let started = ContinuousClock.now
        var asked = started
        for index in min(max(job.processed, 0), items.count)..<items.count {
            if Task.isShuttingDownGracefully { return .interrupted }
            if let othersWaiting, index > job.processed, ContinuousClock.now - started >= options.turn, ContinuousClock.now - asked >= .seconds(1) {
                asked = .now
                if await othersWaiting() { return .yielded }
            }
            if lost.withLockedValue({ $0 }) { return .lost }
            let item = items[index]
            running.item = index
            running.made = [:]
            running.begun = []
            guard let result = await processWithRetries(item, state: &running, lost: lost) else {
                // Shutting down, or given up as stale, in the middle of retries: the item stays unprocessed.
                return lost.withLockedValue({ $0 }) ? .lost : .interrupted
            }
            Counter(label: "roundup_sync_items_total", dimensions: [("op", item.op.rawValue), ("status", result.status.rawValue)]).increment()
            do {
                guard
                    try await store.recordResult(
                        jobID: job.id, holder: holder, index: index, result: result, total: nil, staleAfter: options.staleAfter)
                else { return .lost }
            } catch {
                return .failed("the store could not record a result: \(error)")
            }
            if !result.conflictIDs.isEmpty { await queueConflictPush(job: job, item: item, conflictIDs: result.conflictIDs) }
        }
        return .completed
    }

    func makeState(accountID: String, jobID: String?) async throws -> JobState {
        guard let account = try await store.account(id: accountID), let key = account.trelloAPIKey, let token = account.trelloToken else {
            throw ItemFailure(description: "the account has no Trello key and token")
        }
        let details = try await store.accountDetails(id: accountID)
        let settings = details.map { ($0.conflictPolicy, $0.deleteMode) } ?? AccountDetails.missingAccountPolicy
        let lists = try await store.syncLists(accountID: accountID)
        return JobState(
            jobID: jobID, credentials: TrelloCredentials(apiKey: key, token: token), policy: settings.0, deleteMode: settings.1,
            timeZone: details?.timeZone ?? .utc, lists: Dictionary(lists.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a }))
    }

    private func processWithRetries(_ item: SyncItem, state: inout JobState, lost: NIOLockedValueBox<Bool>) async -> SyncItemResult? {
        let retried = await withRetries(lost: lost, log: "sync item will be retried", ["reminder": "\(item.reminderID)"]) {
            try await process(item, state: &state)
        }
        switch retried {
        case .done(let result):
            return result
        case .failed(let message):
            return SyncItemResult(
                reminderID: item.reminderID, op: JobItemOp(item.op), status: .error, trelloCardID: item.trelloCardID, error: message)
        case .stopped:
            return nil
        }
    }

    /// What retrying one item's work came to.
    enum Retried<T> {
        case done(T)
        /// It cannot succeed as it is (an `ItemFailure`, Trello refusing it), or failed every attempt: why.
        case failed(String)
        /// Shutting down, or the job given up as stale, in the middle of retries.
        case stopped
    }

    /// Runs one item's work (a sync item, a card's links), retrying transient failures (Trello 429/5xx/timeouts, Redis
    /// or the store briefly away) with exponential backoff and jitter, up to `options.itemAttempts`; the job's heartbeat
    /// keeps going meanwhile. Each retry is logged with `message`, `metadata` and the attempt.
    func withRetries<T>(
        lost: NIOLockedValueBox<Bool>, log message: Logger.Message, _ metadata: Logger.Metadata, _ work: () async throws -> T
    ) async -> Retried<T> {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return .done(try await work())
            } catch let failure as ItemFailure {
                return .failed(failure.description)
            } catch let error as TrelloError where !error.isTransient {
                return .failed(error.description)
            } catch {
                if Task.isShuttingDownGracefully || lost.withLockedValue({ $0 }) { return .stopped }
                guard attempt < options.itemAttempts else { return .failed("gave up after \(attempt) attempts: \(error)") }
                let delay = min(8_000, 250 * (1 << (attempt - 1)))
                var metadata = metadata
                metadata["attempt"] = "\(attempt)"
                metadata["error"] = "\(error)"
                logger.info(message, metadata: metadata)
                try? await Task.sleep(for: .milliseconds(delay + Int.random(in: 0...(delay / 4))))
            }
        }
    }

    /// Records the next result of a job whose total grows as it goes (an import, a links migration); false when the job
    /// is no longer this worker's (given up as stale, taken over).
    func appendResult(_ result: SyncItemResult, job: SyncJob, holder: String, processed: inout Int) async throws -> Bool {
        guard
            try await store.recordResult(
                jobID: job.id, holder: holder, index: processed, result: result, total: processed + 1, staleAfter: options.staleAfter)
        else { return false }
        processed += 1
        return true
    }

    /// A page of a list's open cards as a list job sees it: the cards the list's filter admits, with their ids, and when
    /// its read began.
    struct OpenCards {
        var cards: [(id: String, card: [String: JSONValue])]
        var readAt: Date
    }

    /// Why nothing is written to a list whose Trello list is archived.
    static func archivedReason(_ list: SyncListRecord) -> String {
        "the Trello list of \(list.id) is archived: its sync is paused until the list is restored in Trello"
    }

    /// A job over one list's open cards (an import, a link migration): the list its payload names, its board's Priority
    /// field, then `body` for each page of open cards, newest first, 100 a request; `body` ends the walk early by
    /// returning an outcome. A shutdown or a job given up as stale ends it between pages; a failure ends the job
    /// `failed` with `failure` and the error.
    func walkListJob(
        _ job: SyncJob, state: inout JobState, lost: NIOLockedValueBox<Bool>, failure: String,
        _ body: (SyncListRecord, PriorityField?, OpenCards, inout JobState) async throws -> RunOutcome?
    ) async -> RunOutcome {
        guard let listID = job.payload["sync_list_id"]?.stringValue, let list = state.lists[listID] else {
            return .failed("the list is no longer synced")
        }
        if list.archived { return .failed(Self.archivedReason(list)) }
        do {
            let priority = try await priorityField(list, state: &state)
            var before: String?
            while true {
                if Task.isShuttingDownGracefully { return .interrupted }
                if lost.withLockedValue({ $0 }) { return .lost }
                let readAt = Date()
                let page = try await trello.openCards(listID: list.trelloListID, before: before, limit: 100, credentials: state.credentials)
                let admitted = page.compactMap { card -> (id: String, card: [String: JSONValue])? in
                    guard let id = card["id"]?.stringValue, list.settings.filter.admits(CardFacts(card: card)) else { return nil }
                    return (id, card)
                }
                if let outcome = try await body(list, priority, OpenCards(cards: admitted, readAt: readAt), &state) { return outcome }
                guard page.count == 100, let last = page.last?["id"]?.stringValue, last != before else { return .completed }
                before = last
            }
        } catch {
            return .failed("\(failure): \(error)")
        }
    }

    func process(_ item: SyncItem, state: inout JobState) async throws -> SyncItemResult {
        guard let list = state.lists[item.syncListID] else { throw ItemFailure(description: "the list \(item.syncListID) is no longer synced") }
        // A paused pairing (its Trello list archived): nothing is written to the list until it is restored; the app
        // keeps its reminder and sends the change again then.
        if list.archived {
            return .skipped(item, reason: Self.archivedReason(list))
        }
        // A value that cannot be written fails this item alone, naming the field (the API took it as sent).
        var item = item
        for field in item.changedFields {
            guard let value = item.fields[field] else { continue }
            do {
                item.fields[field] = try SyncFields.normalize(named: field, value, path: "fields.\(field)")
            } catch let error as SyncFields.Invalid {
                throw ItemFailure(description: error.description)
            }
        }
        if item.op == .create || item.op == .delete, !list.settings.direction.toTrello {
            return .skipped(
                item, reason: "the list syncs \(list.settings.direction.rawValue): reminders made or deleted in the apps do not reach Trello")
        }
        // An all-day date (a day, no time) is written as noon of that day in the account's time zone, and remembered
        // on the card by the same store write (`DayDates`), so the date goes back to the apps as that day while the
        // card holds that instant. Only a create or an update writes dates.
        defer { state.days = DayDates() }
        switch item.op {
        case .create: state.days = DayDates(&item.fields, only: nil, timeZone: state.timeZone)
        case .update, .move: state.days = DayDates(&item.fields, only: Set(item.changedFields), timeZone: state.timeZone)
        case .delete, .complete: state.days = DayDates()
        }
        state.told = [:]
        var result = try await run(item, list: list, state: &state)
        if !state.told.isEmpty { result.fields = state.told }
        return result
    }

    /// How long the change that tells the other devices what an item left on its card is not handed to the device that
    /// sent the item (it has the values from its result): a day, long past any app's reading of its job; a device that
    /// never read the result gets the change then (an update of values it may already have: harmless).
    static let toldDeclineSeconds: TimeInterval = 86_400

    /// Tells what the item left on the card that the app did not send (`told`): to the sender in its result, and to the
    /// account's other devices by a change the sender is not handed (`toldDeclineSeconds`; a pull without `device_id`
    /// sees it as before). A write that also sends Trello's kept values (`toApps`) is a change for every device.
    func tell(_ told: [String: JSONValue], into record: inout SyncWrite, time: Double, state: inout JobState) {
        guard !told.isEmpty else { return }
        state.told.merge(told) { _, later in later }
        let keepsTrellosValues = !record.toApps.isEmpty
        record.tell(told, time: time)
        if let sender = state.deviceID, !keepsTrellosValues {
            record.toldOnly = (sender, Int64((Date().timeIntervalSince1970 + Self.toldDeclineSeconds) * 1000))
        }
    }

    /// One item, its values checked and its dates made instants.
    private func run(_ item: SyncItem, list: SyncListRecord, state: inout JobState) async throws -> SyncItemResult {
        switch item.op {
        case .create:
            return try await create(item, list: list, state: &state)
        case .delete:
            return try await delete(item, list: list, state: &state)
        case .move:
            return try await move(item, to: list, state: &state)
        case .update, .complete:
            let task = try await mappedTask(item, list: list)
            guard let task, !task.isPlaceholder else {
                throw ItemFailure(description: "no Trello card is mapped to reminder \(item.reminderID); send a create")
            }
            // The card moved to another synced list (in Trello, its move not yet applied by this app): the edit goes to
            // the card there, under that list's settings.
            var list = list
            if !task.deleted, task.syncListID != list.id, let current = state.lists[task.syncListID] { list = current }
            // The card left the list in Trello meanwhile: its `delete` is on its way to the apps; nothing failed.
            if task.deleted {
                return .skipped(item, cardID: task.cardID, reason: "the card \(task.cardID) was deleted, archived or moved out of the list in Trello")
            }
            var fields = item.fields
            var changed = item.changedFields
            if item.op == .complete {
                fields[SyncField.completed] = .bool(true)
                changed = [SyncField.completed.rawValue]
            }
            return try await update(item, fields: fields, changed: changed, cardID: task.cardID, task: task, list: list, state: &state)
        }
    }

    /// The card the item names (or its reminder's), in whichever synced list of the account it is now.
    private func mappedTask(_ item: SyncItem, list: SyncListRecord) async throws -> SyncTaskRecord? {
        if let card = item.trelloCardID {
            return try await store.task(accountID: list.accountID, cardID: card)
        }
        return try await store.task(accountID: list.accountID, reminderID: item.reminderID)
    }

    // MARK: Delete

    func delete(_ item: SyncItem, list: SyncListRecord, state: inout JobState) async throws -> SyncItemResult {
        guard let task = try await mappedTask(item, list: list), !task.isPlaceholder else {
            return SyncItemResult(reminderID: item.reminderID, op: JobItemOp(item.op), status: .ok, error: nil)  // nothing to delete
        }
        // Moved to another synced list meanwhile: the card is deleted there.
        let list = state.lists[task.syncListID] ?? list
        if task.deleted {
            return SyncItemResult(reminderID: item.reminderID, op: JobItemOp(item.op), status: .ok, trelloCardID: task.cardID)
        }
        let mark = echo.fieldKey(account: list.accountID, card: task.cardID, field: EchoFingerprints.removedField, value: .bool(true))
        try await echo.mark([mark])
        if state.deleteMode == .delete {
            _ = try await trello.deleteCard(id: task.cardID, credentials: state.credentials)
        } else {
            _ = try await trello.updateCard(id: task.cardID, attributes: ["closed": .bool(true)], credentials: state.credentials)
        }
        var record = SyncWrite(accountID: list.accountID, syncListID: list.id, cardID: task.cardID, reminderID: item.reminderID)
        record.deleted = true
        record.dropPending = true
        record.activity = [
            NewActivity(
                kind: .delete, syncListID: list.id, cardID: task.cardID, reminderID: item.reminderID, side: .reminders,
                message: state.deleteMode == .delete ? "the card was deleted in Trello" : "the card was archived in Trello", jobID: state.jobID)
        ]
        _ = try await store.recordSyncWrite(record)
        await echo.clear([mark])
        return SyncItemResult(reminderID: item.reminderID, op: JobItemOp(item.op), status: .ok, trelloCardID: task.cardID)
    }

    // MARK: Import

    private func runImport(_ job: SyncJob, holder: String, state: inout JobState, lost: NIOLockedValueBox<Bool>) async -> RunOutcome {
        var processed = job.processed
        return await walkListJob(job, state: &state, lost: lost, failure: "import failed") { list, priority, page, _ in
            let cards = page.cards.map { (cardID: $0.id, fields: CardMapper.fields(fromCard: $0.card, priority: priority)) }
            if try await store.importCards(accountID: list.accountID, syncListID: list.id, cards: cards) > 0 {
                await announceChanges(account: list.accountID, excludeDevice: nil, reason: .import)
            }
            for card in cards {
                let result = SyncItemResult(reminderID: nil, op: .create, status: .ok, trelloCardID: card.cardID)
                guard try await appendResult(result, job: job, holder: holder, processed: &processed) else { return .lost }
            }
            return nil
        }
    }

    // MARK: Reconcile

    /// An on-demand reconciliation: waits (up to a minute) for a scheduled run of the same list to finish.
    private func runReconcile(_ job: SyncJob, holder: String) async -> RunOutcome {
        guard let reconciler else { return .failed("this worker does not reconcile") }
        guard let listID = job.payload["sync_list_id"]?.stringValue else { return .failed("the job names no list") }
        do {
            guard let list = try await store.syncList(accountID: job.accountID, id: listID) else { return .failed("the list is no longer synced") }
            let outcome = try await reconciler.run(list, wait: .seconds(60))
            let result = SyncItemResult(reminderID: nil, op: .reconcile, status: .ok)
            var withSummary = result
            withSummary.summary = outcome.summary
            guard try await store.recordResult(jobID: job.id, holder: holder, index: 0, result: withSummary, total: 1, staleAfter: options.staleAfter)
            else { return .lost }
            return .completed
        } catch {
            return .failed("\(error)")
        }
    }

    // MARK: Pushes

    /// Tells about new changes: a background push for the account's devices (roundup-pusher coalesces them per
    /// device) and a wake-up for its open change streams (`NewChanges`).
    func announceChanges(account: String, excludeDevice: String?, reason: PushRequest.Reason) async {
        let commands = NewChanges.commands(account: account, reason: reason, excludeDevice: excludeDevice, keys: options.keys)
        do {
            _ = try await redis.pipeline(commands, timeout: .seconds(2))
        } catch {
            logger.warning("new changes not announced", metadata: ["account": "\(account)", "error": "\(error)"])
        }
    }

    /// Queues an alert push for the account's devices (roundup-pusher sends it).
    func queueConflictPush(job: SyncJob, item: SyncItem, conflictIDs: [Int64]) async {
        let request = PushRequest(account: job.accountID, kind: .alert, reason: .conflict, conflictIDs: conflictIDs, excludeDevice: job.deviceID)
        do {
            _ = try await redis.send(
                .streamAppend(options.keys.pushStream, maxLength: PushRequest.streamMaxLength, fields: request.fields), timeout: .seconds(2))
        } catch {
            logger.warning("conflict push not queued", metadata: ["account": "\(job.accountID)", "error": "\(error)"])
        }
    }
}
