import Foundation
import RoundupCore
import RoundupStore
import RoundupStreams
import RoundupTrello

extension SyncEngine {
    /// `op: "move"`: the reminder moved to `list` in the apps, so its card moves there — the same card, with its
    /// comments, members and history — never archived, never made again. Then the fields the item names are written as
    /// an update's. A list whose settings keep Trello's side, or whose filter the card does not pass, moves nothing: the
    /// item is `skipped`, its reason naming the list the card stays in (`sync_list_id` of the result's card).
    func move(_ item: SyncItem, to list: SyncListRecord, state: inout JobState) async throws -> SyncItemResult {
        let found: SyncTaskRecord?
        if let card = item.trelloCardID {
            found = try await store.task(accountID: list.accountID, cardID: card)
        } else {
            found = try await store.task(accountID: list.accountID, reminderID: item.reminderID)
        }
        guard let task = found, !task.isPlaceholder else {
            throw ItemFailure(description: "no Trello card is mapped to reminder \(item.reminderID); send a create")
        }
        if task.deleted {
            return .skipped(item, cardID: task.cardID, reason: "the card \(task.cardID) was deleted, archived or moved out of the list in Trello")
        }
        let changed = item.changedFields
        if task.syncListID == list.id {
            // There already (an earlier attempt moved it, or Trello did): only the edits remain.
            guard !changed.isEmpty else { return SyncItemResult(reminderID: item.reminderID, op: .move, status: .ok, trelloCardID: task.cardID) }
            return try await movedEdits(item, cardID: task.cardID, list: list, state: &state)
        }
        guard let source = state.lists[task.syncListID] else {
            throw ItemFailure(description: "the card \(task.cardID) is in a list that is no longer synced")
        }
        if source.archived { return .skipped(item, cardID: task.cardID, reason: Self.archivedReason(source)) }
        for side in [source, list] where !side.settings.direction.toTrello {
            return .skipped(
                item, cardID: task.cardID,
                reason:
                    "the list \(side.id) syncs \(side.settings.direction.rawValue): a reminder moved in the apps does not move its card; it stays in \(source.id)"
            )
        }
        guard let card = try await trello.card(id: task.cardID, credentials: state.credentials) else {
            return .skipped(item, cardID: task.cardID, reason: "the card \(task.cardID) no longer exists in Trello")
        }
        if card["closed"]?.boolValue == true {
            return .skipped(item, cardID: task.cardID, reason: "the card \(task.cardID) was archived in Trello")
        }
        guard list.settings.filter.admits(CardFacts(card: card)) else {
            return .skipped(
                item, cardID: task.cardID,
                reason: "the card \(task.cardID) does not pass the filter of the list \(list.id) (its labels or members); it stays in \(source.id)")
        }
        // Fingerprinted before the write: the webhook of our own move is no move for the apps.
        let mark = echo.moveKey(account: list.accountID, card: task.cardID, syncList: list.id)
        try await echo.mark([mark])
        var attributes: [String: JSONValue] = ["idList": .string(list.trelloListID)]
        if list.trelloBoardID != source.trelloBoardID { attributes["idBoard"] = .string(list.trelloBoardID) }
        guard let moved = try await trello.updateCard(id: task.cardID, attributes: attributes, credentials: state.credentials) else {
            await echo.clear([mark])
            return .skipped(item, cardID: task.cardID, reason: "the card \(task.cardID) no longer exists in Trello")
        }
        // The card as it is in its new list: across boards, its labels and Priority are the new board's (a label the
        // board lacks, an option it does not have, are gone), and every app is told what changed so.
        let priority = try await priorityField(list, state: &state)
        let now = Date().timeIntervalSince1970
        var record = SyncWrite(accountID: list.accountID, syncListID: list.id, cardID: task.cardID, reminderID: task.reminderID)
        record.jobID = state.jobID
        let fields = CardMapper.fields(fromCard: moved, priority: priority)
        var told: [String: JSONValue] = [:]
        for (field, value) in fields {
            record.stamp(field, value, time: now)
            if let stamp = task.stamps[field], stamp.hash != value.fieldHash, list.settings.syncsToReminders(named: field) { told[field] = value }
        }
        tell(told, into: &record, time: now, state: &state)
        record.activity = [
            NewActivity(
                kind: .move, syncListID: list.id, cardID: task.cardID, reminderID: task.reminderID, side: .reminders, oldValue: .string(source.id),
                newValue: .string(list.id), message: "the reminder moved in the apps; its card moved in Trello", jobID: state.jobID)
        ]
        _ = try await store.recordSyncWrite(record)
        await echo.clear([mark])
        if !record.toApps.isEmpty { await announceChanges(account: list.accountID, excludeDevice: state.deviceID, reason: .sync) }
        guard !changed.isEmpty else { return SyncItemResult(reminderID: item.reminderID, op: .move, status: .ok, trelloCardID: task.cardID) }
        return try await movedEdits(item, cardID: task.cardID, list: list, state: &state)
    }

    /// The edits a move carries, written to the card in its new list as an update's.
    private func movedEdits(_ item: SyncItem, cardID: String, list: SyncListRecord, state: inout JobState) async throws -> SyncItemResult {
        let task = try await store.task(accountID: list.accountID, cardID: cardID)
        var result = try await update(item, fields: item.fields, changed: item.changedFields, cardID: cardID, task: task, list: list, state: &state)
        result.op = .move
        return result
    }
}
