import Foundation
public import RoundupClient

/// The apps' sync loop: pulls the server's changes into the app's reminders and sends the person's edits back, so
/// that a crash at any step makes nothing twice.
///
/// Made from a `RoundupClient`, the app's `RemindersStore` and the state saved last (`SyncState`, nil on a new
/// device). The engine hands a new state to `saveState` before every step that could not be repeated safely without it
/// (and as `Event.stateUpdate`): the app writes it where it survives a crash, and returns when it has.
///
/// - `fetchChanges()`: the changes this device may apply (the server hands each change to one device of the person:
///   its `device_id`), applied to the store, then acknowledged in bulk. Each change's result is in the state before
///   its acknowledgement: a crash between the two acknowledges it at the next fetch, without applying it again.
/// - `sendChanges(_:)`: the person's edits, found by comparing each reminder with the state's copy as last synced
///   (what the engine itself wrote is in that copy, so EventKit's report of the engine's own write sends nothing),
///   posted as one sync job whose batch and idempotency key are in the state until its results are: a crash after the
///   post posts the same batch with the same key, and the server starts no second job.
public actor RoundupSyncEngine {
    public enum Event: Sendable {
        /// A new state to persist (the same one `saveState` was given).
        case stateUpdate(SyncState)
        /// A fetch ended: what it applied.
        case fetched(FetchSummary)
        /// A batch of edits ended: each item's outcome.
        case sent(SendSummary)
        /// Edits the server recorded as conflicts (their ids: `RoundupClient.conflicts()`, `resolveConflict`).
        case conflicts([Int])
        /// Something the person or the app must look at: an item the server refused, a change it could not apply,
        /// Trello refusing the account's token (`account.needs_attention`: the person signs in to Trello again).
        case needsAttention(String)
        /// A synced list renamed, archived (its pairing paused) or restored in Trello, as the server now has it.
        case listChanged(SyncList)
    }

    public struct FetchSummary: Sendable, Hashable {
        /// Changes applied, by type (`create`, `update`, `complete`, `move`, `delete`).
        public var applied: [String: Int] = [:]
        /// Changes for a reminder this device does not have (another device made it and iCloud has not brought it yet):
        /// given back to the server for the person's other devices, and fetched again later.
        public var deferred: [Int] = []
        public var total: Int { applied.values.reduce(0, +) }
    }

    public struct SendSummary: Sendable, Hashable {
        /// Each reminder sent, with its item's status (`ok`, `conflict`, `duplicate`, `error`, `skipped`).
        public var statuses: [String: String] = [:]
        public var count: Int { statuses.count }
    }

    public nonisolated let events: AsyncStream<Event>
    private let continuation: AsyncStream<Event>.Continuation
    private let client: RoundupClient
    private let store: any RemindersStore
    /// The fields the store keeps (`RemindersStore.carriedFields`): the only ones the engine reads, writes and sends.
    private let carried: Set<ReminderField>
    /// This device's id, as registered with the server (`RoundupClient.registerDevice`).
    public nonisolated let deviceID: String
    private let saveState: @Sendable (SyncState) async throws -> Void
    /// The state as last saved (or being saved).
    public private(set) var state: SyncState

    public init(
        client: RoundupClient, store: any RemindersStore, deviceID: String, state: SyncState? = nil,
        saveState: @escaping @Sendable (SyncState) async throws -> Void
    ) throws {
        if let state, state.version > SyncState.currentVersion {
            throw SyncStateError(description: "the saved state is version \(state.version); this engine reads up to \(SyncState.currentVersion)")
        }
        (events, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(100))
        self.client = client
        self.store = store
        self.carried = store.carriedFields
        self.deviceID = deviceID
        self.state = state ?? SyncState()
        self.saveState = saveState
    }

    deinit { continuation.finish() }

    /// Sends the person's edits, then fetches the server's changes (what a background push or an app launch does).
    public func sync() async throws {
        try await exclusively { try await sendThenFetch() }
    }

    /// The send, then the fetch even when the send failed (a server that refuses the edits still has changes to give).
    private func sendThenFetch() async throws {
        var failure: (any Error)?
        do { _ = try await send(nil) } catch { failure = error }
        _ = try await fetch()
        if let failure { throw failure }
    }

    // One operation at a time: an actor runs another call at each `await` of the one before, and two fetches (or a
    // fetch and a send) interleaved would apply a change twice or send a value half applied. Calls wait their turn,
    // in order.
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    private func exclusively<T: Sendable>(_ operation: () async throws -> T) async throws -> T {
        if busy {
            await withCheckedContinuation { waiting.append($0) }
        } else {
            busy = true
        }
        defer {
            if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
        }
        return try await operation()
    }

    /// While the app is in the foreground: reads the server's live stream for this device (which then gets no
    /// background pushes) and applies each change as it comes, through `sync()`: the person's edits not sent yet go
    /// first, so a Trello edit of the same field never overwrites one unseen (the server settles the two by the list's
    /// conflict policy), then the fetch, with its saves and bulk acknowledgements (a burst of changes is one fetch).
    /// Returns when the calling task is cancelled (the app leaves the foreground); throws when the server refuses the
    /// stream for good (a revoked token, an unknown device). The stream reconnects by itself after a network drop.
    public func runWhileForeground() async throws {
        for try await change in client.liveChanges(deviceID: deviceID) {
            // Applied already by the fetch an earlier change of the same burst started.
            if appliedByLastFetch.remove(change.id) != nil { continue }
            try await sync()
        }
    }

    /// The changes the last fetch applied (not saved: only to fold a live stream's burst into one fetch).
    private var appliedByLastFetch: Set<Int> = []

    /// Whether a remote notification (`userInfo` of `application(_:didReceiveRemoteNotification:)`) is the server's:
    /// then hand it to `handleRemoteNotification()`.
    public nonisolated static func isServerNotification(_ userInfo: [AnyHashable: Any]) -> Bool { userInfo["roundup"] != nil }

    /// The server's push: reads the lists and the account again (`refreshLists`), then `sync()`. The app completes the
    /// background fetch when this returns.
    public func handleRemoteNotification() async throws {
        try await exclusively {
            _ = try await refresh()
            try await sendThenFetch()
        }
    }

    /// Reads the account's lists and the account: a list renamed, archived or restored in Trello since the last look
    /// is a `listChanged` event; an account that needs the person (`needs_attention`) a `needsAttention` one.
    @discardableResult
    public func refreshLists() async throws -> [SyncList] { try await exclusively { try await refresh() } }

    private func refresh() async throws -> [SyncList] {
        let lists = try await client.lists()
        var changed = false
        for list in lists {
            let seen = SyncState.ListSeen(name: list.name, archived: list.archived)
            guard state.lists[list.syncListId] != seen else { continue }
            if let before = state.lists[list.syncListId] {
                continuation.yield(.listChanged(list))
                // Restored: the edits its pause held (and any the server skipped meanwhile) go out now.
                if before.archived && !list.archived { state.held = [:] }
            }
            state.lists[list.syncListId] = seen
            changed = true
        }
        for id in state.lists.keys.sorted() where !lists.contains(where: { $0.syncListId == id }) {
            // Unpaired: its reminders are no longer synced (nothing is sent for them, nothing deleted).
            state.lists[id] = nil
            state.reminders = state.reminders.filter { $0.value.listID != id }
            changed = true
        }
        if let reason = try await client.account().needsAttention {
            continuation.yield(.needsAttention("the account needs the person: \(reason.rawValue)"))
        }
        if changed { try await save() }
        return lists
    }

    private func save() async throws {
        try await saveState(state)
        continuation.yield(.stateUpdate(state))
    }

    /// The store's reminder, with only the fields it carries.
    private func stored(_ id: String) async throws -> Reminder? {
        try await store.reminder(id).map(carriedOnly)
    }

    /// The store's reminders of a list, with only the fields it carries.
    private func stored(inList listID: String) async throws -> [Reminder] {
        try await store.reminders(inList: listID).map(carriedOnly)
    }

    private func carriedOnly(_ reminder: Reminder) -> Reminder {
        var reminder = reminder
        reminder.values = reminder.values.keeping(carried)
        return reminder
    }

    /// A change's values, as the store carries them.
    private func carriedValues(_ fields: ChangeFields) -> ReminderValues { ReminderValues(fields).keeping(carried) }

    // MARK: Inbound

    /// Applies the changes the server has for this device, then acknowledges them.
    @discardableResult
    public func fetchChanges() async throws -> FetchSummary { try await exclusively { try await fetch() } }

    private func fetch() async throws -> FetchSummary {
        appliedByLastFetch = []
        // Given back long ago: another device applied it (or its limit passed); saved with the next page.
        let now = Date()
        state.deferredSince = state.deferredSince.filter { now.timeIntervalSince($0.value) < 2 * Self.deferralLimit }
        try await finishCreate()
        try await acknowledgeApplied()
        var summary = FetchSummary()
        var after = 0
        while true {
            let page = try await client.changesPage(after: after, limit: 200, deviceID: deviceID)
            // The page's creates are recorded before the store is asked, its results before it is acknowledged: three
            // saves a page, not one a change (the state is written whole each time).
            state.creating = try await creates(in: page.changes)
            if !state.creating.isEmpty { try await save() }
            for change in page.changes { try await apply(change, into: &summary) }
            appliedByLastFetch.formUnion(page.changes.map(\.id))
            state.creating = []
            try await save()
            try await acknowledgeApplied()
            guard page.hasMore, let last = page.changes.last else { break }
            after = last.id
        }
        if !summary.deferred.isEmpty { _ = try? await client.releaseChanges(deviceID: deviceID, ids: summary.deferred) }
        continuation.yield(.fetched(summary))
        return summary
    }

    /// The reminder a change is about: the one it names, or the one the state maps to its card.
    private func reminderID(for change: Change) -> String? {
        if let id = change.reminderId, state.reminders[id] != nil { return id }
        if let mapped = state.reminders.first(where: { $0.value.cardID == change.trelloCardId })?.key { return mapped }
        return change.reminderId
    }

    /// The changes of a page that will make a reminder: a create or a move of a card whose reminder the store lacks
    /// (and did not delete).
    private func creates(in changes: [Change]) async throws -> [SyncState.PendingCreate] {
        var creates: [SyncState.PendingCreate] = []
        for change in changes where change.changeType.known == .create || change.changeType.known == .move {
            let id = reminderID(for: change)
            if let id {
                if state.reminders[id] != nil { continue }
                if try await stored(id) != nil { continue }
            }
            if Self.movesAnotherDevicesReminder(change) { continue }
            creates.append(.init(changeID: change.id, cardID: change.trelloCardId, listID: change.syncListId, values: carriedValues(change.fields)))
        }
        return creates
    }

    private func apply(_ change: Change, into summary: inout FetchSummary) async throws {
        let type = change.changeType.known
        let id = reminderID(for: change)
        let current: Reminder? = if let id { try await stored(id) } else { nil }
        let changed = Set(change.changedFields.map(\.rawValue))
        switch type {
        case .create?, .move?:
            if let current {
                // A create for a reminder the store has (iCloud brought it from the device that made it), or a move.
                // A create carries every field of the card; a move names those Trello changed beside it.
                let values = current.values.applying(change.fields, only: type == .create ? nil : changed).keeping(carried)
                if current.listID != change.syncListId { try await store.move(current.id, toList: change.syncListId) }
                if values != current.values { try await store.update(current.id, values) }
                let synced = state.reminders[current.id]?.values.applying(change.fields, only: changed).keeping(carried) ?? values
                state.reminders[current.id] = .init(cardID: change.trelloCardId, listID: change.syncListId, values: synced)
                state.appliedChanges[change.id] = .init(reminderID: current.id, created: type == .create)
            } else if let id, state.reminders[id] != nil {
                // Deleted here, not yet sent: the delete goes out with the next edits.
                state.appliedChanges[change.id] = .init(reminderID: nil, created: false)
            } else if Self.movesAnotherDevicesReminder(change) {
                // The card's reminder is on another device (iCloud has not brought it): moved there, not made here.
                if giveBack(change, into: &summary) { return }
                state.appliedChanges[change.id] = .init(reminderID: nil, created: false)
            } else {
                let values = carriedValues(change.fields)
                // The reminder may be here already: another device made it for this change (its hold lapsed before it
                // acknowledged) and iCloud brought it, or the person made the same one. Taken, not made twice.
                let same = Self.madeFor(values, among: try await stored(inList: change.syncListId), taken: Set(state.reminders.keys))
                let made: String
                if let same { made = same.id } else { made = try await store.create(values, inList: change.syncListId) }
                state.reminders[made] = .init(cardID: change.trelloCardId, listID: change.syncListId, values: values)
                state.appliedChanges[change.id] = .init(reminderID: made, created: true)
            }
        case .update?, .complete?:
            if let current {
                let values = current.values.applying(change.fields, only: changed).keeping(carried)
                if values != current.values { try await store.update(current.id, values) }
                let synced = state.reminders[current.id]?.values.applying(change.fields, only: changed).keeping(carried) ?? values
                // The list as synced: a move the person made here and has not sent yet is still sent.
                let listID = state.reminders[current.id]?.listID ?? change.syncListId
                state.reminders[current.id] = .init(cardID: change.trelloCardId, listID: listID, values: synced)
                state.appliedChanges[change.id] = .init(reminderID: current.id, created: false)
            } else if let id, state.reminders[id] != nil {
                state.appliedChanges[change.id] = .init(reminderID: nil, created: false)  // deleted here: the delete goes out
            } else if giveBack(change, into: &summary) {
                return
            } else {
                state.appliedChanges[change.id] = .init(reminderID: nil, created: false)
            }
        case .delete?:
            if let current {
                try await store.delete(current.id)
            } else if let id, state.reminders[id] == nil, change.reminderId != nil, giveBack(change, into: &summary) {
                // The card's reminder is on another device (iCloud has not brought it here): deleted there.
                return
            }
            if let id { state.reminders[id] = nil }
            state.appliedChanges[change.id] = .init(reminderID: nil, created: false)
        case nil:
            // A change type a newer server knows: left for an app that knows it.
            continuation.yield(.needsAttention("change \(change.id) is of a type this engine does not know (\(change.changeType.rawValue))"))
            return
        }
        summary.applied[change.changeType.rawValue, default: 0] += 1
    }

    /// Gives the change back for the person's other devices (true), unless it has gone round for `deferralLimit`
    /// with no device applying it: then no device has its reminder, and it is acknowledged (false).
    private func giveBack(_ change: Change, into summary: inout FetchSummary) -> Bool {
        let now = Date()
        let since = state.deferredSince[change.id] ?? now
        guard now.timeIntervalSince(since) < Self.deferralLimit else {
            state.deferredSince[change.id] = nil
            return false
        }
        state.deferredSince[change.id] = since
        summary.deferred.append(change.id)
        return true
    }

    /// How long a change for a reminder this device lacks is given back to the others before it is acknowledged
    /// (iCloud brings a reminder to every device within minutes; a day covers a device that was off).
    public static let deferralLimit: TimeInterval = 86_400

    /// A move of a card that has a reminder (between two synced lists): never a new reminder; on a device without
    /// that reminder, it waits for iCloud. A card moved in from a list that is not synced has none, and is made.
    static func movesAnotherDevicesReminder(_ change: Change) -> Bool {
        change.changeType.known == .move && change.reminderId != nil
    }

    /// A create cut short by a crash: the store may hold the reminder it made (an unmapped reminder of the list with
    /// the change's values). Found, it is the change's; not found, the change (still this device's, unacknowledged)
    /// comes again and is made then.
    private func finishCreate() async throws {
        guard !state.creating.isEmpty else { return }
        var mapped = Set(state.reminders.keys)
        var lists: [String: [Reminder]] = [:]
        for pending in state.creating {
            if lists[pending.listID] == nil { lists[pending.listID] = try await stored(inList: pending.listID) }
            // Two cards with the same values: each takes its own reminder, or none (it is made when its change comes again).
            guard let made = Self.madeFor(pending.values, among: lists[pending.listID] ?? [], taken: mapped) else { continue }
            mapped.insert(made.id)
            state.reminders[made.id] = .init(cardID: pending.cardID, listID: pending.listID, values: pending.values)
            state.appliedChanges[pending.changeID] = .init(reminderID: made.id, created: true)
        }
        state.creating = []
        try await save()
    }

    /// The reminder of a list that a create with `values` made or may take: one no synced reminder is (`taken`), with
    /// those values.
    static func madeFor(_ values: ReminderValues, among reminders: [Reminder], taken: Set<String>) -> Reminder? {
        reminders.first { !taken.contains($0.id) && $0.values == values }
    }

    private func acknowledgeApplied() async throws {
        guard !state.appliedChanges.isEmpty else { return }
        let acks = state.appliedChanges.sorted { $0.key < $1.key }.map {
            ChangeAck(id: $0.key, reminderID: $0.value.created ? $0.value.reminderID : nil)
        }
        do {
            _ = try await client.ack(acks)
        } catch let error as RoundupError where error.status == 404 {
            // One of them was acknowledged already (a crash after the acknowledgement, before the state was saved):
            // the others one by one.
            for ack in acks {
                do { _ = try await client.ack(ack.id, reminderID: ack.reminderID) } catch let error as RoundupError where error.status == 404 {}
            }
        }
        for ack in acks { state.deferredSince[ack.id] = nil }
        state.appliedChanges = [:]
        try await save()
    }

    // MARK: Outbound

    /// Sends the person's edits: of the reminders named (those EventKit reported changed), or of every reminder of
    /// the account's synced lists when nil. Reminders the state knows and the store no longer has are deleted.
    @discardableResult
    public func sendChanges(_ reminderIDs: Set<String>? = nil) async throws -> SendSummary {
        try await exclusively { try await send(reminderIDs) }
    }

    private func send(_ reminderIDs: Set<String>?) async throws -> SendSummary {
        var summary = SendSummary()
        // A reminder made for a change before a crash is that change's, not the person's new one.
        try await finishCreate()
        if let batch = state.outbound { try await finish(batch, into: &summary) }
        var candidates: [Reminder] = []
        var gone: [String] = []
        if let reminderIDs {
            for id in reminderIDs.sorted() {
                if let reminder = try await stored(id) { candidates.append(reminder) } else if state.reminders[id] != nil { gone.append(id) }
            }
        } else {
            let lists = Set(try await refresh().map(\.syncListId))
            for list in lists.sorted() { candidates += try await stored(inList: list) }
            let present = Set(candidates.map(\.id))
            for id in state.reminders.keys.sorted() where !present.contains(id) {
                if try await stored(id) == nil { gone.append(id) }
            }
            // Held values of a reminder gone from the store and never synced (a stale copy iCloud then deleted).
            state.held = state.held.filter { present.contains($0.key) || state.reminders[$0.key] != nil }
        }
        // A reminder that differs from the state's copy may not hold the person's edit: another device of the person
        // applied a change from the server and iCloud brought the result here, or made the reminder and its card. The
        // server's view of the lists' cards (`GET /lists/{id}/cards`, read once a list) says: a value the card has is
        // synced, not sent back.
        // A list archived in Trello is paused: its reminders' edits wait (sent, they would be skipped) until it is back.
        let paused = Set(state.lists.filter(\.value.archived).keys)
        let differing = candidates.filter { reminder in
            guard !paused.contains(reminder.listID), !paused.contains(state.reminders[reminder.id]?.listID ?? "") else { return false }
            if state.held[reminder.id] == reminder.values { return false }  // refused as it is
            return state.reminders[reminder.id].map { $0.cardID == nil || $0.listID != reminder.listID || $0.values != reminder.values } ?? true
        }
        gone.removeAll { paused.contains(state.reminders[$0]?.listID ?? "") }
        var server = try await cards(of: Set(differing.map(\.listID)))
        // A reminder this engine has no copy of whose card is not in its list: another device moved it (or Trello
        // did, and another device applied it); its card is in one of the other lists, and it is a move, not a new card.
        if differing.contains(where: { state.reminders[$0.id] == nil && server[$0.id] == nil }) {
            let others = Set(state.lists.keys).subtracting(paused).subtracting(differing.map(\.listID))
            server.merge(try await cards(of: others)) { mine, _ in mine }
        }
        var learned = false
        // Reminders this engine has no copy of whose card is in another list: a move made on another device, or a
        // copy iCloud has not brought up to date with a move Trello made. Neither sent as new (a second card) nor
        // moved back: the device that synced it sends the person's move when iCloud brings it there.
        var elsewhere: Set<String> = []
        for reminder in differing {
            guard let card = server[reminder.id] else { continue }
            // Three ways: a field the reminder holds as the card does is synced (whoever wrote it); any other keeps the
            // state's copy, so a Trello edit not yet fetched is not taken for the person's (and sent back over it). A
            // reminder the state lacks (another device's) starts from the card.
            let base = state.reminders[reminder.id]
            // Without a copy of its own, a reminder that differs from its card may be a stale copy (iCloud behind the
            // device that applied Trello's edit): it goes as a `create` with its `modified_at`, and the server keeps
            // only what is newer than the card's values.
            if base == nil && card.listID != reminder.listID {
                elsewhere.insert(reminder.id)
                continue
            }
            if base == nil && card.values != reminder.values { continue }
            let values = (base?.values ?? card.values).adopting(card.values, heldBy: reminder.values)
            let listID = card.listID == reminder.listID ? reminder.listID : base?.listID ?? reminder.listID
            state.reminders[reminder.id] = .init(cardID: card.cardID, listID: listID, values: values)
            learned = true
        }
        if learned { try await save() }
        var changes: [SyncChange] = []
        var sent: [String: ReminderValues] = [:]
        let now = Date()
        for reminder in differing where !elsewhere.contains(reminder.id) {
            let synced = state.reminders[reminder.id]
            guard let synced, let cardID = synced.cardID else {
                changes.append(
                    SyncChange(
                        op: .create, syncListId: reminder.listID, reminderId: reminder.id,
                        fields: reminder.values.syncFields(since: nil, carrying: carried),
                        modifiedAt: reminder.modifiedAt ?? now)
                )
                sent[reminder.id] = reminder.values
                continue
            }
            var fields = reminder.values.fields(differingFrom: synced.values)
            // The URL is the first link: with the links changed too, the links say it (sent as well, it would be
            // added as one more link).
            if fields.contains(.attachments) { fields.removeAll { $0 == .url } }
            let op: Components.Schemas.SyncOp
            if reminder.listID != synced.listID {
                op = .move
            } else if fields.isEmpty {
                continue
            } else {
                op = fields == [.completed] && reminder.values.completed ? .complete : .update
            }
            changes.append(
                SyncChange(
                    op: op, syncListId: reminder.listID, reminderId: reminder.id, trelloCardId: cardID,
                    fields: reminder.values.syncFields(since: synced.values, carrying: carried),
                    changedFields: fields, modifiedAt: reminder.modifiedAt ?? now))
            sent[reminder.id] = reminder.values
        }
        for id in gone where state.held[id] != Self.deleted {
            guard let synced = state.reminders[id] else { continue }
            guard let cardID = synced.cardID else {
                state.reminders[id] = nil  // never reached Trello
                continue
            }
            changes.append(SyncChange(op: .delete, syncListId: synced.listID, reminderId: id, trelloCardId: cardID, modifiedAt: now))
        }
        guard !changes.isEmpty else {
            if summary.count > 0 { continuation.yield(.sent(summary)) }
            return summary
        }
        // Jobs of at most `batchSize` changes (the server takes 500, and bounds the Trello writes one job implies): a
        // crash between them leaves the rest differing, sent by the next call.
        for start in stride(from: 0, to: changes.count, by: Self.batchSize) {
            let part = Array(changes[start..<min(start + Self.batchSize, changes.count)])
            let ids = Set(part.map(\.reminderId))
            let batch = SyncState.OutboundBatch(
                idempotencyKey: RoundupClient.makeIdempotencyKey(), changes: part, sentValues: sent.filter { ids.contains($0.key) }, jobID: nil)
            state.outbound = batch
            try await save()
            try await finish(batch, into: &summary)
        }
        continuation.yield(.sent(summary))
        return summary
    }

    /// The server's cards of `lists` that know their reminder, by reminder: the card, its list, its values.
    private func cards(of lists: Set<String>) async throws -> [String: (cardID: String, listID: String, values: ReminderValues)] {
        var cards: [String: (cardID: String, listID: String, values: ReminderValues)] = [:]
        for list in lists.sorted() {
            for card in try await client.listCards(list) {
                guard let reminderID = card.reminderId, let fields = card.fields else { continue }
                cards[reminderID] = (card.trelloCardId, list, carriedValues(fields))
            }
        }
        return cards
    }

    /// The most changes one sync job carries.
    static let batchSize = 100

    /// Posts the batch (again, after a crash: the same key), waits for its job and records each item's outcome.
    private func finish(_ batch: SyncState.OutboundBatch, into summary: inout SendSummary) async throws {
        var batch = batch
        var job: SyncJob
        var stale = 0
        while true {
            let jobID: String
            if let known = batch.jobID {
                jobID = known
            } else {
                do {
                    jobID = try await client.submitSync(deviceID: deviceID, changes: batch.changes, idempotencyKey: batch.idempotencyKey).jobId
                } catch let error as RoundupError where Self.refusedForGood(error) {
                    // The server refuses the batch as it is (a list unpaired meanwhile, a card it no longer syncs): held,
                    // not posted again on every call; the person's next edit of a reminder sends it again.
                    for change in batch.changes { state.held[change.reminderId] = batch.sentValues[change.reminderId] }
                    state.outbound = nil
                    try await save()
                    continuation.yield(.needsAttention("the server refused \(batch.changes.count) edits: \(error.message)"))
                    return
                }
                batch.jobID = jobID
                state.outbound = batch
                try await save()
            }
            job = try await client.waitForJob(jobID)
            guard job.isStale else { break }
            // Its worker stopped: the same edits, posted again as a new job (the server maps what it made already),
            // saved before they are posted; three times at most.
            stale += 1
            guard stale < 3 else {
                throw RoundupError(status: 0, code: OpenEnum(rawValue: "stale"), message: "job \(jobID) went stale three times")
            }
            batch.idempotencyKey = RoundupClient.makeIdempotencyKey()
            batch.jobID = nil
            state.outbound = batch
            try await save()
        }
        var conflicts: [Int] = []
        for result in job.results {
            guard let id = result.reminderId, let change = batch.changes.first(where: { $0.reminderId == id }) else { continue }
            summary.statuses[id] = result.status.rawValue
            switch result.status.known {
            case .ok?, .conflict?:
                // What was sent is what is synced now (a conflict comes back as a change when it is settled).
                state.held[id] = nil
                if change.op == .delete {
                    state.reminders[id] = nil
                } else if var values = batch.sentValues[id] {
                    if let fields = result.fields { values = try await learn(fields, for: id, sent: values) }
                    let cardID = result.trelloCardId ?? change.trelloCardId ?? state.reminders[id]?.cardID
                    state.reminders[id] = .init(cardID: cardID, listID: change.syncListId, values: values)
                }
                if let ids = result.conflictIds { conflicts += ids }
            case .skipped?, .duplicate?, .error?, nil:
                // Not written: the reminder keeps its synced copy (so its edit is still an edit), and these values are
                // held, not sent again until the reminder changes or its list is restored. A skip says why (a list
                // paused or keeping Trello's side, a card gone from the list: its delete is on its way); a possible
                // duplicate waits for the person's choice (`client.duplicates()`).
                state.held[id] = batch.sentValues[id] ?? Self.deleted
                let why = result.reason ?? result.error ?? (result.status.known == .duplicate ? "a possible duplicate of another card" : nil)
                continuation.yield(.needsAttention("reminder \(id): \(result.status.rawValue)\(why.map { ": " + $0 } ?? "")"))
            }
        }
        state.outbound = nil
        try await save()
        if !conflicts.isEmpty { continuation.yield(.conflicts(conflicts)) }
    }

    /// What the card holds that was sent in another form (label ids, the ids of new check items and links, the first
    /// link): written into the reminder, where the person has not changed that field since it was sent; answers the
    /// values now synced. The sender learns them here only (the server hands the change to the other devices).
    private func learn(_ fields: ChangeFields, for id: String, sent: ReminderValues) async throws -> ReminderValues {
        let names = ReminderValues.names(in: fields)
        guard !names.isEmpty else { return sent }
        let synced = sent.applying(fields, only: names).keeping(carried)
        guard let current = try await stored(id) else { return synced }
        var values = current.values
        for field in ReminderField.allCases where current.values.same(field, as: sent) { values.take(field, from: synced) }
        if values != current.values { try await store.update(id, values) }
        return synced
    }

    /// A batch the server will refuse however often it is posted (not a job running, a limit or a server's trouble).
    static func refusedForGood(_ error: RoundupError) -> Bool {
        (400..<500).contains(error.status) && error.status != 408 && error.status != 409 && error.status != 429
            && error.status != 401 && error.status != 403
    }

    /// What `held` keeps for a refused delete.
    static let deleted = ReminderValues(title: "\u{0}deleted")
}
