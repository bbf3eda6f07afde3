import Foundation
import RoundupCore
import RoundupStore
import RoundupStreams
import RoundupTrello

/// Updates: an app's edit of a card written field by field, under the conflict policy (`FieldMerge`).
extension SyncEngine {
    /// Writes the item's changed fields, field by field against Trello's current card: a field Trello changed
    /// since the last sync (seen in the card, or still unacknowledged by the apps) is a conflict for the policy
    /// (`FieldMerge`).
    func update(
        _ item: SyncItem, fields appFields: [String: JSONValue], changed: [String], cardID: String, task: SyncTaskRecord?,
        list: SyncListRecord, state: inout JobState
    ) async throws -> SyncItemResult {
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
        let (card, there): ([String: JSONValue], SyncListRecord)
        switch try await cardToUpdate(item, changed: changed, cardID: cardID, list: list, state: state) {
        case .found(let found, let target): (card, there) = (found, target)
        case .skipped(let result): return result
        }
        let priority = try await priorityField(there, state: &state)
        let pending = try await store.unackedChange(accountID: there.accountID, cardID: cardID)
        let fields = Set(changed).subtracting(skipped).compactMap(SyncField.init(rawValue:))
        let merge = FieldMerge(
            changed: fields, app: appFields, trello: CardMapper.fields(fromCard: card, priority: priority), stamps: task?.stamps ?? [:],
            pending: pending, begun: Set(fields.filter { state.begun.contains("\(state.item)|\($0)") }), days: state.days.days,
            settings: there.settings, accountPolicy: state.policy, appTime: item.modifiedAt.timeIntervalSince1970,
            cardTime: card["dateLastActivity"]?.stringValue.flatMap(Timestamp.date)?.timeIntervalSince1970 ?? Date().timeIntervalSince1970,
            origin: .init(syncListID: there.id, cardID: cardID, reminderID: item.reminderID, jobID: state.jobID)
        ).plan()
        // The list the store has the card in: its record stays there until the webhook of a move says otherwise.
        let home = list.id
        let conflictIDs = try await carryOut(
            merge, item: item, card: card, cardID: cardID, home: home, list: there, readTime: readTime, state: &state)
        var result = SyncItemResult(
            reminderID: item.reminderID, op: JobItemOp(item.op), status: conflictIDs.isEmpty ? .ok : .conflict, trelloCardID: cardID,
            conflictIDs: conflictIDs)
        result.skippedFields = skipped
        return result
    }

    enum CardToUpdate {
        /// The card, in the synced list the edit is written under.
        case found([String: JSONValue], in: SyncListRecord)
        case skipped(SyncItemResult)
    }

    /// The card an update is written to, as Trello holds it now; skipped when it left the list.
    private func cardToUpdate(
        _ item: SyncItem, changed: [String], cardID: String, list: SyncListRecord, state: JobState
    ) async throws -> CardToUpdate {
        // The card left the list in Trello a moment ago (its webhook not yet applied): its `delete` is on its way to the
        // apps, so the edit is skipped, not failed.
        guard let card = try await trello.card(id: cardID, credentials: state.credentials) else {
            return .skipped(.skipped(item, cardID: cardID, reason: "the card \(cardID) no longer exists in Trello"))
        }
        var list = list
        if card["closed"]?.boolValue != true, card["idList"]?.stringValue != list.trelloListID,
            let there = state.lists.values.first(where: { $0.trelloListID == card["idList"]?.stringValue })
        {
            // Moved in Trello a moment ago to another synced list (its move on its way to the apps): the edit is written
            // there, under that list's settings.
            list = there
        }
        if card["closed"]?.boolValue == true || card["idList"]?.stringValue != list.trelloListID {
            try await forgetSkipped(changed, cardID: cardID, item: item, list: list)
            return .skipped(.skipped(item, cardID: cardID, reason: "the card \(cardID) was archived or moved out of the list in Trello"))
        }
        return .found(card, in: list)
    }

    /// Writes what `merge` decided: the app's values to Trello, then one store write with the stamps, the values that
    /// stand, Trello's values for the apps, conflicts and activity. Returns the conflicts' ids.
    private func carryOut(
        _ merge: FieldMerge.Plan, item: SyncItem, card: [String: JSONValue], cardID: String, home: String, list: SyncListRecord,
        readTime: Double, state: inout JobState
    ) async throws -> [Int64] {
        var record = SyncWrite(accountID: list.accountID, syncListID: home, cardID: cardID, reminderID: item.reminderID)
        record.conflicts = merge.conflicts
        record.jobID = state.jobID
        // The card holds the app's all-day dates it writes or already had: remembered with this write, so the changes
        // it sends the apps carry the day.
        state.days.record(into: &record, fields: merge.holds)
        record.activity = merge.activity
        // Dated when the card was read: a Trello edit made after that read still counts as newer.
        for (field, value) in merge.toApps.merging(merge.agreed, uniquingKeysWith: { a, _ in a }) {
            record.stamp(field, value, time: readTime)
        }
        var marks = merge.write.map { echo.fieldKey(account: list.accountID, card: cardID, field: $0.key, value: $0.value) }
        let written = try await writeFields(merge.write, card: card, list: list, marks: &marks, state: &state)
        record.stamps.merge(written.stamps) { _, new in new }
        record.values.merge(written.values) { _, new in new }
        // What the card holds now where it is not what the app sent (a label named, a new check item's id, the option a
        // level picked, the first link's attachment): every app gets it, the sender included.
        var told: [String: JSONValue] = [:]
        for (field, value) in written.values where value != merge.write[field] && list.settings.syncsToReminders(named: field) {
            told[field] = value
        }
        record.winning = merge.winning.merging(written.values.filter { merge.winning[$0.key] != nil }) { _, held in held }
        record.toApps = merge.toApps
        tell(told, into: &record, time: Date().timeIntervalSince1970, state: &state)
        let conflictIDs = try await store.recordSyncWrite(record)
        await echo.clear(marks)
        // Trello's side was kept for some fields: the other devices learn it from the change just written.
        if !record.toApps.isEmpty { await announceChanges(account: list.accountID, excludeDevice: state.deviceID, reason: .sync) }
        return conflictIDs
    }

    /// The app's edit of `fields` was skipped because the card has left the list in Trello while the store still has it
    /// live: the app keeps a value Trello does not hold, counting on the delete on its way. That delete may never come:
    /// when the card is back before the worker reads the archive's webhook and a later write of ours stamps the card
    /// after it, the removal reads as delivered late. So the store forgets what it knew of those fields (a
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
}
