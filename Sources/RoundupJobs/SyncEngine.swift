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

    /// The all-day dates an item sets (their marks, and the day the app sent), and the dates it makes timed again
    /// (marks to forget): recorded with the store write of the fields the card then holds.
    struct DayDates {
        var marks: [String: FieldStamp] = [:]
        var forget: Set<String> = []
        /// The app's value of each all-day date (the day), for a conflict or a duplicate kept to show and write later.
        var days: [String: JSONValue] = [:]

        init() {}

        /// Makes each all-day due or start date of `fields` (of `only`, when given) its instant in `timeZone`.
        init(_ fields: inout [String: JSONValue], only: Set<String>?, timeZone: AccountTimeZone) {
            for field in [SyncField.dueDate, SyncField.startDate] {
                guard let value = fields[field.rawValue], only?.contains(field.rawValue) ?? true else { continue }
                let key = FieldStamps.dayDateKey(field)
                if case .string(let text) = value, let day = DayDate(text) {
                    let instant = Timestamp.string(day.instant(in: timeZone.zone))
                    fields[field.rawValue] = .string(instant)
                    marks[key] = FieldStamps.dayDateStamp(day: day, instant: instant, time: Date().timeIntervalSince1970)
                    days[field.rawValue] = value
                } else {
                    forget.insert(key)
                }
            }
        }

        /// Adds to `record` the marks (and forgets) of the `fields` the card now holds the app's value of.
        func record(into record: inout SyncWrite, fields: some Sequence<String>) {
            for name in fields {
                guard let field = SyncField(rawValue: name), field == .dueDate || field == .startDate else { continue }
                let key = FieldStamps.dayDateKey(field)
                if let mark = marks[key] {
                    record.stamps[key] = mark
                    record.forget.remove(key)
                } else if forget.contains(key) {
                    record.forget.insert(key)
                }
            }
        }

        /// `values` with each all-day date as the app sent it (its day).
        func appValues(_ values: [String: JSONValue]) -> [String: JSONValue] { values.merging(days) { _, day in day } }
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

    // MARK: Update

    /// Writes the item's changed fields, field by field against Trello's current card: a field Trello changed
    /// since the last sync (seen in the card, or still unacknowledged by the apps) is a conflict for the policy.
    func update(
        _ item: SyncItem, fields appFields: [String: JSONValue], changed: [String], cardID: String, task: SyncTaskRecord?,
        list: SyncListRecord, state: inout JobState
    ) async throws -> SyncItemResult {
        // The list the store has the card in: its record stays there until the webhook of a move says otherwise.
        let home = list.id
        var list = list
        // A field that does not flow to Trello is never written there, whatever Trello holds.
        let skipped = Set(changed).filter { !list.settings.syncsToTrello(named: $0) }.sorted()
        if !skipped.isEmpty, skipped.count == Set(changed).count {
            // Nothing of it flows to Trello: Trello is not even read.
            var result = SyncItemResult.skipped(
                item, cardID: cardID, reason: "the list's settings keep \(skipped.joined(separator: ", ")) from Trello: nothing was written")
            result.skippedFields = skipped
            return result
        }
        let readTime = Date().timeIntervalSince1970
        // The card left the list in Trello a moment ago (its webhook not yet applied): its `delete` is on its way to the
        // apps, so the edit is skipped, not failed.
        guard let card = try await trello.card(id: cardID, credentials: state.credentials) else {
            return .skipped(item, cardID: cardID, reason: "the card \(cardID) no longer exists in Trello")
        }
        if card["closed"]?.boolValue != true, card["idList"]?.stringValue != list.trelloListID,
            let there = state.lists.values.first(where: { $0.trelloListID == card["idList"]?.stringValue })
        {
            // Moved in Trello a moment ago to another synced list (its move on its way to the apps): the edit is written
            // there, under that list's settings.
            list = there
        }
        if card["closed"]?.boolValue == true || card["idList"]?.stringValue != list.trelloListID {
            try await forgetSkipped(changed, cardID: cardID, item: item, list: list)
            return .skipped(item, cardID: cardID, reason: "the card \(cardID) was archived or moved out of the list in Trello")
        }
        let priority = try await priorityField(list, state: &state)
        let current = CardMapper.fields(fromCard: card, priority: priority)
        let pending = try await store.unackedChange(accountID: list.accountID, cardID: cardID)
        let cardTime = card["dateLastActivity"]?.stringValue.flatMap(Timestamp.date)?.timeIntervalSince1970 ?? Date().timeIntervalSince1970
        let appTime = item.modifiedAt.timeIntervalSince1970

        var write: [String: JSONValue] = [:]
        var winning: [String: JSONValue] = [:]
        var toApps: [String: JSONValue] = [:]
        var conflicts: [NewConflict] = []
        var agreed: [String: JSONValue] = [:]
        var activity: [NewActivity] = []
        var holds: Set<String> = []
        func note(_ kind: ActivityKind, _ field: SyncField, old: JSONValue, new: JSONValue, rule: ConflictRule? = nil, kept: SyncSide? = nil) {
            activity.append(
                NewActivity(
                    kind: kind, syncListID: list.id, cardID: cardID, reminderID: item.reminderID, side: .reminders, field: field.rawValue,
                    oldValue: old,
                    newValue: new, rule: rule, kept: kept,
                    message: rule == .manual ? "an open conflict: Trello's value stands until the user chooses" : nil, jobID: state.jobID))
        }
        for name in Set(changed).subtracting(skipped).sorted() {
            guard let field = SyncField(rawValue: name) else { continue }
            let mine = appFields[field] ?? .null
            let theirs = current[field] ?? .null
            let stamp = task?.stamps[field]
            // An all-day date waits for the apps as its day: compared as the instant the card holds for it.
            // A move carries every field; only those it names changed in Trello.
            var pendingValue = pending.flatMap { p in
                p.changeType == .delete || (p.changeType == .move && !p.changedFields.contains(name)) ? nil : p.fields[field]
            }.map {
                FieldStamps.takeDay(field, $0, stamps: task?.stamps ?? [:])
            }
            // What our own write sent back to the apps (`SyncWrite.tell`) is theirs, not a Trello edit they have not seen;
            // once they change the field again, that value is rewritten with the new one, or it would undo it.
            var told = false
            if let value = pendingValue, task?.stamps[SyncWrite.toldStamp(name)]?.hash == value.fieldHash {
                pendingValue = nil
                told = value != (mine == theirs ? theirs : mine)
            }
            if mine == theirs {
                holds.insert(name)
                // Both sides agree (an earlier attempt wrote it, say): make the stamp say so too.
                if pendingValue == nil, stamp?.hash != theirs.fieldHash { agreed[field] = theirs }
                if told { winning[field] = theirs }
                continue
            }
            // A field an earlier attempt of this item began writing holds part of our own write, not a Trello edit.
            let ours = state.begun.contains("\(state.item)|\(field)")
            let trelloChanged = !ours && ((stamp.map { $0.hash != theirs.fieldHash } ?? false) || pendingValue != nil)
            if !trelloChanged {
                holds.insert(name)
                write[field] = mine
                // A move waiting for the apps carries the field's older value: it is rewritten with this one, or applying
                // the move would undo the edit.
                let carried = pending?.changeType == .move && pending?.fields[field] != nil
                if told || carried { winning[field] = mine }
                note(.change, field, old: theirs, new: mine)
                continue
            }
            // When Trello's side changed: the action time we stamped, or the card's last activity.
            let theirTime = stamp.flatMap { $0.hash == theirs.fieldHash ? $0.time : nil } ?? cardTime
            let appWins: Bool
            let rule: ConflictRule
            if field == .completed, abs(appTime - theirTime) <= 2 {
                appWins = mine == .bool(true)  // within two seconds, done wins
                rule = .doneWins
            } else if !list.settings.syncsToReminders(field) {
                // A field Trello's side never reaches the apps for: the app's value is the only one there is.
                appWins = true
                rule = .oneWay
            } else {
                let policy = list.settings.conflictPolicy(of: field, account: state.policy)
                rule = ConflictRule(policy)
                switch policy {
                case .preferReminders: appWins = true
                case .preferTrello: appWins = false
                case .lww: appWins = appTime >= theirTime
                case .manual:
                    // The app's own value (an all-day date as its day), as the user will be shown and may choose it.
                    conflicts.append(NewConflict(field: field.rawValue, trelloValue: theirs, remindersValue: state.days.days[field.rawValue] ?? mine))
                    appWins = false
                }
            }
            // The value set aside is `old`, the one that stands is `new`.
            note(.conflict, field, old: appWins ? theirs : mine, new: appWins ? mine : theirs, rule: rule, kept: appWins ? .reminders : .trello)
            if appWins {
                holds.insert(name)
                write[field] = mine
                winning[field] = mine
            } else if pendingValue != theirs {
                toApps[field] = theirs
            }
        }

        var record = SyncWrite(accountID: list.accountID, syncListID: home, cardID: cardID, reminderID: item.reminderID)
        record.conflicts = conflicts
        record.jobID = state.jobID
        // The card holds the app's all-day dates it writes or already had: remembered with this write, so the changes
        // it sends the apps carry the day.
        state.days.record(into: &record, fields: holds)
        record.activity = activity
        // Dated when the card was read: a Trello edit made after that read still counts as newer.
        for (field, value) in toApps.merging(agreed, uniquingKeysWith: { a, _ in a }) {
            record.stamp(field, value, time: readTime)
        }
        var marks = write.map { echo.fieldKey(account: list.accountID, card: cardID, field: $0.key, value: $0.value) }
        let written = try await writeFields(write, card: card, list: list, marks: &marks, state: &state)
        record.stamps.merge(written.stamps) { _, new in new }
        record.values.merge(written.values) { _, new in new }
        // What the card holds now where it is not what the app sent (a label named, a new check item's id, the option a
        // level picked, the first link's attachment): every app gets it, the sender included.
        var told: [String: JSONValue] = [:]
        for (field, value) in written.values where value != write[field] && list.settings.syncsToReminders(named: field) { told[field] = value }
        record.winning = winning.merging(written.values.filter { winning[$0.key] != nil }) { _, held in held }
        record.toApps = toApps
        tell(told, into: &record, time: Date().timeIntervalSince1970, state: &state)
        let conflictIDs = try await store.recordSyncWrite(record)
        await echo.clear(marks)
        // Trello's side was kept for some fields: the other devices learn it from the change just written.
        if !record.toApps.isEmpty { await announceChanges(account: list.accountID, excludeDevice: state.deviceID, reason: .sync) }
        var result = SyncItemResult(
            reminderID: item.reminderID, op: JobItemOp(item.op), status: conflictIDs.isEmpty ? .ok : .conflict, trelloCardID: cardID,
            conflictIDs: conflictIDs)
        result.skippedFields = skipped
        return result
    }

    /// The app's edit of `fields` was skipped because the card has left the list in Trello while the store still has it
    /// live: the app keeps a value Trello does not hold, counting on the delete on its way. That delete may never come:
    /// when the card is back before the worker reads the archive's webhook and a later write of ours stamps the card
    /// after it, the removal reads as delivered late (#43 item 6). So the store forgets what it knew of those fields (a
    /// stamp no value hashes to, older than any action): the next sight of the card sends Trello's values to the apps,
    /// and a write of the field stamps it again.
    private func forgetSkipped(_ fields: [String], cardID: String, item: SyncItem, list: SyncListRecord) async throws {
        var record = SyncWrite(accountID: list.accountID, syncListID: list.id, cardID: cardID, reminderID: item.reminderID)
        for field in fields where list.settings.syncsToReminders(named: field) {
            record.stamps[field] = FieldStamp(hash: "skipped", time: 0)
        }
        guard !record.stamps.isEmpty else { return }
        _ = try await store.recordSyncWrite(record)
    }

    /// The board's Priority field: from the store, else from Trello (then kept); `refresh` asks Trello again.
    func priorityField(_ list: SyncListRecord, state: inout JobState, refresh: Bool = false) async throws -> PriorityField? {
        if !refresh, let known = state.priority[list.trelloBoardID] { return known }
        var field: PriorityField?
        if !refresh { field = try await store.priorityField(accountID: list.accountID, boardID: list.trelloBoardID) }
        if field == nil {
            field = try await trello.priorityField(boardID: list.trelloBoardID, credentials: state.credentials)
            if let field { try await store.savePriorityField(accountID: list.accountID, boardID: list.trelloBoardID, field: field) }
        }
        state.priority[list.trelloBoardID] = .some(field)
        return field
    }

    // MARK: Create

    func create(_ item: SyncItem, list: SyncListRecord, state: inout JobState) async throws -> SyncItemResult {
        let existing = try await store.task(accountID: list.accountID, reminderID: item.reminderID)
        let allFields = item.changedFields.isEmpty ? Array(item.fields.keys) : item.changedFields
        if let existing, !existing.isPlaceholder, !existing.deleted, existing.syncListID == list.id {
            // The reminder is mapped already: another device of the person sends the reminder iCloud brought it, or
            // the app did not see our result. No card is made. Only a value that differs from the card as the server
            // last saw it is written, as an update (an earlier attempt that died after making the card); a device
            // sending what it was given writes nothing, and is answered the card.
            // A value older than the card's (a stale copy iCloud brought before a Trello edit reached it) is not.
            let differing = allFields.filter { name in
                guard let value = item.fields[name] else { return false }
                guard let stamp = existing.stamps[name] else { return true }
                return stamp.hash != value.fieldHash && item.modifiedAt.timeIntervalSince1970 > stamp.time
            }
            guard !differing.isEmpty else {
                return SyncItemResult(reminderID: item.reminderID, op: JobItemOp(item.op), status: .ok, trelloCardID: existing.cardID)
            }
            return try await update(item, fields: item.fields, changed: differing, cardID: existing.cardID, task: existing, list: list, state: &state)
        }
        if let existing, !existing.isPlaceholder, existing.deleted, existing.syncListID == list.id,
            try await store.unackedChange(accountID: list.accountID, cardID: existing.cardID)?.changeType == .delete
        {
            // The reminder's card left the list in Trello, and its delete is on its way to the apps: the device that
            // sends it had it from iCloud before the delete reached it. No card is made.
            return .skipped(
                item, cardID: existing.cardID,
                reason: "the card \(existing.cardID) was deleted, archived or moved out of the list in Trello: its delete is on its way")
        }
        if let existing, !existing.isPlaceholder, !existing.deleted, existing.syncListID != list.id, state.lists[existing.syncListID] != nil {
            // Mapped to a live card of another synced list: Trello moved it, and the device that sends this had the
            // reminder from iCloud before the move reached it (or read the list before the move). No second card.
            return .skipped(
                item, cardID: existing.cardID,
                reason: "the reminder's card \(existing.cardID) is in the synced list \(existing.syncListID): its move is on its way to the apps")
        }
        if let existing, !existing.isPlaceholder, let removed = existing.removedAt, item.modifiedAt.timeIntervalSince1970 <= removed {
            // The same, its delete acknowledged already by another device: this copy of the reminder is older than the
            // card's removal (iCloud has not deleted it here yet). Made again, the card would come back; it does not.
            return .skipped(
                item, cardID: existing.cardID,
                reason: "the card \(existing.cardID) was deleted, archived or moved out of the list in Trello after this reminder last changed")
        }
        let title = item.fields[SyncField.title]?.stringValue ?? ""
        let due = item.fields[SyncField.dueDate]?.stringValue.flatMap(Timestamp.date)
        let unsure = existing?.isPlaceholder == true  // an earlier attempt may have made the card before it died
        let cards = try await openCards(list, state: &state, fresh: unsure)
        let mapped = try await store.mappedCardIDs(accountID: list.accountID, syncListID: list.id)
        let wanted = SyncFields.normalizedTitle(title)
        let match = cards.first { card in
            guard let id = card["id"]?.stringValue, !mapped.contains(id), SyncFields.normalizedTitle(card["name"]?.stringValue ?? "") == wanted else {
                return false
            }
            guard let due else { return true }
            guard let theirs = card["due"]?.stringValue.flatMap(Timestamp.date) else { return false }
            return abs(theirs.timeIntervalSince(due)) < 1
        }
        if let match, let cardID = match["id"]?.stringValue {
            if unsure {
                // Ours, from the attempt that died: adopt it, then bring it up to date.
                let priority = try await priorityField(list, state: &state)
                var adopt = SyncWrite(accountID: list.accountID, syncListID: list.id, cardID: cardID, reminderID: item.reminderID)
                let now = Date().timeIntervalSince1970
                for (field, value) in CardMapper.fields(fromCard: match, priority: priority) {
                    adopt.stamp(field, value, time: now)
                }
                _ = try await store.recordSyncWrite(adopt)
                let task = try await store.task(accountID: list.accountID, cardID: cardID)
                return try await update(item, fields: item.fields, changed: allFields, cardID: cardID, task: task, list: list, state: &state)
            }
            let id = try await store.addDuplicate(
                accountID: list.accountID,
                NewDuplicate(
                    syncListID: list.id, reminderID: item.reminderID, cardID: cardID, title: title,
                    dueDate: state.days.appValues(item.fields)[SyncField.dueDate.rawValue]?.stringValue, fields: state.days.appValues(item.fields),
                    jobID: state.jobID))
            return SyncItemResult(reminderID: item.reminderID, op: JobItemOp(item.op), status: .duplicate, trelloCardID: cardID, duplicateID: id)
        }
        let card = try await createCard(item.fields, reminderID: item.reminderID, list: list, days: state.days, state: &state)
        return SyncItemResult(reminderID: item.reminderID, op: JobItemOp(item.op), status: .ok, trelloCardID: card)
    }

    /// Makes the card and maps it to the reminder; returns its id. `note` explains the create in the history.
    func createCard(
        _ appFields: [String: JSONValue], reminderID: String, list: SyncListRecord, days: DayDates = DayDates(), state: inout JobState,
        note: String? = nil
    ) async throws -> String {
        // Only the fields that flow to Trello (the title always does: `SyncSettings.validate`).
        let fields = appFields.filter { list.settings.syncsToTrello(named: $0.key) }
        // An option or label the board lacks fails the item before a card is made for it (a create, a duplicate kept).
        let labelIDs = try await checkBeforeCreate(fields, list: list, state: &state)
        let title = fields[SyncField.title]?.stringValue ?? ""
        let createMark = echo.createKey(account: list.accountID, syncList: list.id, title: title)
        try await echo.mark([createMark])
        var attributes: [String: JSONValue] = [:]
        for (name, value) in fields {
            if let attribute = SyncField(rawValue: name).flatMap({ SyncFields.cardAttribute[$0] }) { attributes[attribute] = value }
        }
        // A list that syncs only some cards: the new card gets what the filter asks (one of its labels, one of its
        // members), or its webhook would take the reminder it came from away again.
        if let labelIDs { attributes["idLabels"] = .array(labelIDs.map(JSONValue.string)) }
        if let member = list.settings.filter.members.sorted().first { attributes["idMembers"] = .array([.string(member)]) }
        // The placeholder says "a card may exist for this reminder" — only while Trello may have made one.
        try await store.reserveCreate(accountID: list.accountID, syncListID: list.id, reminderID: reminderID)
        let card: [String: JSONValue]
        do {
            card = try await trello.createCard(listID: list.trelloListID, attributes: attributes, credentials: state.credentials)
        } catch let error as TrelloError where (error.status ?? 0) >= 400 && (error.status ?? 0) < 500 {
            try? await store.releaseCreate(accountID: list.accountID, reminderID: reminderID)
            await echo.clear([createMark])
            throw error
        }
        // TrelloClient.createCard checks the id; the placeholder stays, as for any reply we cannot trust.
        guard let cardID = card["id"]?.stringValue else { throw ItemFailure(description: "Trello's reply for the new card has no id") }
        state.openCards[list.id, default: []].append(card)
        let priority = try await priorityField(list, state: &state)
        var record = SyncWrite(accountID: list.accountID, syncListID: list.id, cardID: cardID, reminderID: reminderID)
        let now = Date().timeIntervalSince1970
        for (field, value) in CardMapper.fields(fromCard: card, priority: priority) {
            record.stamp(field, value, time: now)
        }
        days.record(into: &record, fields: fields.keys)
        record.activity = [
            NewActivity(
                kind: .create, syncListID: list.id, cardID: cardID, reminderID: reminderID, side: .reminders, newValue: .object(fields),
                message: note,
                jobID: state.jobID)
        ]
        _ = try await store.recordSyncWrite(record)
        // The rest are requests of their own; the card is known now, so they are fingerprinted by card.
        var extra: [String: JSONValue] = [:]
        for (name, value) in fields {
            guard let field = SyncField(rawValue: name), SyncFields.cardAttribute[field] == nil, field != .labels else { continue }
            if value == .null || value == .array([]) || (field == .priorityLevel && value == .number(0)) { continue }
            extra[field] = value
        }
        // What the apps did not send or sent in another form (the card's Trello link, label ids, new check items'
        // ids): every app gets it, the sender included, as an update of the new reminder.
        var told: [String: JSONValue] = [:]
        let made = CardMapper.fields(fromCard: card, priority: priority)
        for field in [SyncField.trelloURL, SyncField.labels] where list.settings.syncsToReminders(field) {
            if let value = made[field], value != fields[field] ?? (field == SyncField.labels ? .array([]) : .null) { told[field] = value }
        }
        var more = SyncWrite(accountID: list.accountID, syncListID: list.id, cardID: cardID, reminderID: reminderID)
        var marks = extra.map { echo.fieldKey(account: list.accountID, card: cardID, field: $0.key, value: $0.value) }
        if !extra.isEmpty {
            let written = try await writeFields(extra, card: card, list: list, marks: &marks, state: &state)
            more.stamps = written.stamps
            more.values = written.values
            for (field, value) in written.values where value != fields[field] && list.settings.syncsToReminders(named: field) { told[field] = value }
        }
        tell(told, into: &more, time: now, state: &state)
        if !more.stamps.isEmpty { _ = try await store.recordSyncWrite(more) }
        await echo.clear(marks)
        await echo.clear([createMark])
        return cardID
    }

    func openCards(_ list: SyncListRecord, state: inout JobState, fresh: Bool) async throws -> [[String: JSONValue]] {
        if !fresh, let cards = state.openCards[list.id] { return cards }
        var all: [[String: JSONValue]] = []
        var before: String?
        while true {
            let page = try await trello.openCards(listID: list.trelloListID, before: before, limit: 1000, credentials: state.credentials)
            all += page
            guard page.count == 1000, let last = page.last?["id"]?.stringValue else { break }
            before = last
        }
        state.openCards[list.id] = all
        return all
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
