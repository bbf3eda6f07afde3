package import Foundation
package import RoundupCore

/// A card's row as an outbound write or an import leaves it.
package struct OutboundTask: Sendable, Equatable {
    package var accountID: String
    package var syncListID: String
    package var cardID: String
    /// Nil keeps the reminder the card maps to.
    package var reminderID: String?
    package var stamps: [String: FieldStamps.Stamp]
    /// The card's values of the fields named, set over those stored (`FieldValues`).
    package var values: [String: JSONValue] = [:]
    package var deleted: Bool
    /// When we last wrote the card to Trello; nil keeps the earlier time.
    package var syncedAt: String?
    package var now: String
}

/// A conflict to store: one open conflict per card and field, holding the latest values of both sides.
package struct StoredConflict: Sendable, Equatable {
    package var accountID: String
    package var syncListID: String
    package var cardID: String
    package var reminderID: String?
    package var field: String
    package var trelloValueJSON: String
    package var remindersValueJSON: String
    package var jobID: String?
    package var now: String
}

/// The rows of the outbound rules, beside the change rows they fold changes into. SQLite answers each call with a
/// statement in its write transaction; PostgreSQL reads the card's rows up front and writes them back in order.
package protocol OutboundRows: ChangeRows {
    mutating func putTask(_ task: OutboundTask) throws
    mutating func deleteTask(accountID: String, cardID: String) throws
    /// Drops every change of the card the apps have not acknowledged.
    mutating func dropChanges(accountID: String, cardID: String) throws
    mutating func openConflictID(accountID: String, cardID: String, field: String) throws -> Int64?
    mutating func updateConflict(id: Int64, _ conflict: StoredConflict) throws
    /// The new conflict's id, or nil when the store learns it only when it writes the row (PostgreSQL).
    mutating func insertConflict(_ conflict: StoredConflict) throws -> Int64?
}

extension ChangeApplier where Rows: OutboundRows {
    /// What an outbound write (to Trello, by a sync job or a resolution) changes in the store, once for both stores:
    /// the card's stamps (so its webhook echo is recognised, and membership is stamped when the card leaves or comes
    /// back), its mapping (and the create placeholder goes), the apps' changes (dropped when the app deleted its
    /// reminder; else the app's winning values rewrite an unacknowledged Trello change that still says otherwise, and
    /// Trello's kept values are sent), and the conflicts, one open per field. Returns the conflicts' ids in order, nil
    /// where the store gives the id only when it writes.
    package mutating func record(_ w: SyncWrite, now: Date) throws -> [Int64?] {
        let nowText = Timestamp.string(now)
        let existing = try rows.task(accountID: w.accountID, cardID: w.cardID)
        var stamps = existing?.stamps ?? [:]
        stamps.merge(w.stamps) { _, written in written }
        for key in w.forget { stamps.removeValue(forKey: key) }
        if w.deleted {
            stamps[FieldStamps.membership] = FieldStamps.Stamp(hash: "removed", time: now.timeIntervalSince1970)
        } else if existing?.deleted ?? true {
            stamps[FieldStamps.membership] = FieldStamps.Stamp(hash: "present", time: now.timeIntervalSince1970)
        }
        try rows.putTask(
            OutboundTask(
                accountID: w.accountID, syncListID: w.syncListID, cardID: w.cardID, reminderID: w.reminderID, stamps: stamps, values: w.values,
                deleted: w.deleted, syncedAt: nowText, now: nowText))
        if let reminder = w.reminderID { try rows.deleteTask(accountID: w.accountID, cardID: SyncTaskRecord.placeholderPrefix + reminder) }

        let observation = CardObservation(
            accountID: w.accountID, syncListID: w.syncListID, cardID: w.cardID, actionID: nil, actionDate: now, kind: .removed)
        if w.dropPending {
            try rows.dropChanges(accountID: w.accountID, cardID: w.cardID)
        } else {
            if !w.winning.isEmpty, let previous = try rows.latestChange(accountID: w.accountID, cardID: w.cardID), previous.type != .delete {
                var winning = w.winning
                FieldStamps.giveDays(&winning, stamps: stamps)
                let overlap = winning.filter { name, value in previous.fields[name].map { $0 != value } ?? false }
                if !overlap.isEmpty { try writeChange(observation, type: .update, changed: overlap.keys.sorted(), fields: overlap, stamps: stamps) }
            }
            if !w.toApps.isEmpty {
                let type: ChangeType = w.toApps == [SyncField.completed.rawValue: .bool(true)] ? .complete : .update
                try writeChange(
                    observation, type: type, changed: w.toApps.keys.sorted(), fields: w.toApps, stamps: stamps,
                    declined: w.toldOnly.map { Hold(deviceID: $0.sender, until: $0.until) })
            }
        }

        for activity in w.activity { try note(w.accountID, activity) }

        var ids: [Int64?] = []
        for conflict in w.conflicts {
            let stored = StoredConflict(
                accountID: w.accountID, syncListID: w.syncListID, cardID: w.cardID, reminderID: w.reminderID, field: conflict.field,
                trelloValueJSON: conflict.trelloValue.canonicalJSON, remindersValueJSON: conflict.remindersValue.canonicalJSON, jobID: w.jobID,
                now: nowText)
            if let id = try rows.openConflictID(accountID: w.accountID, cardID: w.cardID, field: conflict.field) {
                try rows.updateConflict(id: id, stored)
                ids.append(id)
            } else {
                ids.append(try rows.insertConflict(stored))
            }
        }
        return ids
    }

    /// An import of a Trello list, once for both stores: each card not yet on the devices (no reminder mapped, or
    /// gone from the list) is stamped present and sent to the apps as a create, mapped to no reminder yet.
    package mutating func importCards(accountID: String, syncListID: String, cards: [(cardID: String, fields: [String: JSONValue])], now: Date) throws
    {
        let nowText = Timestamp.string(now)
        for card in cards {
            let task = try rows.task(accountID: accountID, cardID: card.cardID)
            if let task, task.reminderID != nil, !task.deleted { continue }
            guard try admitsNewCard(syncListID: syncListID, cardID: card.cardID, task: task) else { continue }
            var stamps = card.fields.mapValues { FieldStamps.Stamp(hash: $0.fieldHash, time: now.timeIntervalSince1970) }
            stamps[FieldStamps.membership] = FieldStamps.Stamp(hash: "present", time: now.timeIntervalSince1970)
            for (key, mark) in task?.stamps ?? [:] where FieldStamps.isDayDateKey(key) { stamps[key] = mark }
            try rows.putTask(
                OutboundTask(
                    accountID: accountID, syncListID: syncListID, cardID: card.cardID, reminderID: nil, stamps: stamps, values: card.fields,
                    deleted: false, syncedAt: nil, now: nowText))
            let observation = CardObservation(
                accountID: accountID, syncListID: syncListID, cardID: card.cardID, actionID: nil, actionDate: now, kind: .removed)
            try writeChange(observation, type: .create, changed: card.fields.keys.sorted(), fields: card.fields, stamps: stamps)
            let settings = try rules(syncListID).settings
            try note(
                accountID,
                NewActivity(
                    kind: .create, syncListID: syncListID, cardID: card.cardID, side: .trello,
                    newValue: .object(card.fields.filter { settings.syncsToReminders(named: $0.key) }), message: "imported from the Trello list"))
        }
    }
}
