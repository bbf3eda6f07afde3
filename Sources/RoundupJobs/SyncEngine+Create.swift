import Foundation
import RoundupCore
import RoundupStore
import RoundupTrello

/// Creates: a new reminder becomes a card, once, even across retries and crashes.
extension SyncEngine {
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
}
