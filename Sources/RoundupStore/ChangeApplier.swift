import Foundation
import GRDB
import RoundupCore

/// A field's hash and the time of the action that set it, as kept in `sync_tasks.field_hashes`.
struct FieldStamp: Codable, Equatable {
    var h: String
    var t: Double
}

/// Applies card observations inside one write transaction: compares field hashes with `sync_tasks`,
/// writes pending changes, and merges a card's new change into its unacknowledged one.
struct ChangeApplier {
    let db: Database
    private(set) var written = 0
    private let encoder = JSONEncoder()
    private let decoder = JSONDecoder()
    private let now = Timestamp.now()

    init(db: Database) {
        self.db = db
        encoder.outputFormatting = .sortedKeys
    }

    private struct Task {
        var id: Int64
        var syncListID: String
        var stamps: [String: FieldStamp]
        var deleted: Bool
    }

    mutating func apply(_ o: CardObservation) throws {
        let task = try Row.fetchOne(
            db, sql: "SELECT id, sync_list_id, field_hashes, deleted FROM sync_tasks WHERE account_id = ? AND trello_card_id = ?",
            arguments: [o.accountID, o.cardID]
        ).map { row in
            Task(id: row[0], syncListID: row[1], stamps: (try? decoder.decode([String: FieldStamp].self, from: Data((row[2] as String).utf8))) ?? [:], deleted: row[3])
        }
        let time = o.actionDate.timeIntervalSince1970

        switch o.kind {
        case .removed:
            guard let task, !task.deleted, task.syncListID == o.syncListID else { return }
            try db.execute(
                sql: "UPDATE sync_tasks SET deleted = 1, last_action_id = ?, updated_at = ? WHERE id = ?",
                arguments: [o.actionID, now, task.id])
            try writeChange(o, type: "delete", changed: [], fields: [:])

        case .fields(let fields, let full):
            if let task, !task.deleted, task.syncListID == o.syncListID {
                var stamps = task.stamps
                var changed: [String: JSONValue] = [:]
                for (name, value) in fields {
                    let hash = value.fieldHash
                    if let stamp = stamps[name] {
                        if stamp.t > time { continue }  // an older action than the one that set this field
                        if stamp.h == hash {
                            stamps[name] = FieldStamp(h: hash, t: time)
                            continue
                        }
                    }
                    stamps[name] = FieldStamp(h: hash, t: time)
                    changed[name] = value
                }
                guard !changed.isEmpty else { return }
                try db.execute(
                    sql: "UPDATE sync_tasks SET field_hashes = ?, last_action_id = ?, updated_at = ? WHERE id = ?",
                    arguments: [try encodeStamps(stamps), o.actionID, now, task.id])
                let type = changed.count == 1 && changed[SyncField.completed] == .bool(true) ? "complete" : "update"
                try writeChange(o, type: type, changed: changed.keys.sorted(), fields: changed)
            } else {
                // First sight of the card in this list (new, moved in, or back from the archive).
                let stamps = fields.mapValues { FieldStamp(h: $0.fieldHash, t: time) }
                try db.execute(
                    sql: """
                        INSERT INTO sync_tasks (account_id, sync_list_id, trello_card_id, field_hashes, deleted, last_action_id, created_at, updated_at)
                        VALUES (?, ?, ?, ?, 0, ?, ?, ?)
                        ON CONFLICT (account_id, trello_card_id) DO UPDATE SET sync_list_id = excluded.sync_list_id,
                            field_hashes = excluded.field_hashes, deleted = 0, last_action_id = excluded.last_action_id,
                            updated_at = excluded.updated_at
                        """,
                    arguments: [o.accountID, o.syncListID, o.cardID, try encodeStamps(stamps), o.actionID, now, now])
                try writeChange(o, type: full ? "create" : "update", changed: fields.keys.sorted(), fields: fields)
            }
        }
    }

    private func encodeStamps(_ stamps: [String: FieldStamp]) throws -> String {
        String(decoding: try encoder.encode(stamps), as: UTF8.self)
    }

    /// Writes a change; an unacknowledged change of the same card is folded into it (one row, a new id).
    private mutating func writeChange(_ o: CardObservation, type: String, changed: [String], fields: [String: JSONValue]) throws {
        var type = type
        var changed = changed
        var fields = fields
        if let previous = try Row.fetchOne(
            db,
            sql: "SELECT id, change_type, changed_fields, fields FROM pending_changes WHERE account_id = ? AND trello_card_id = ? ORDER BY id DESC LIMIT 1",
            arguments: [o.accountID, o.cardID])
        {
            let previousID: Int64 = previous[0]
            let previousType: String = previous[1]
            let previousChanged = (try? decoder.decode([String].self, from: Data((previous[2] as String).utf8))) ?? []
            let previousFields = (try? decoder.decode([String: JSONValue].self, from: Data((previous[3] as String).utf8))) ?? [:]
            try db.execute(sql: "DELETE FROM pending_changes WHERE id = ?", arguments: [previousID])
            switch (previousType, type) {
            case ("create", "delete"):
                return  // the apps never saw the card: nothing to tell them
            case (_, "delete"), (_, "create"):
                break  // the newer state replaces the older one whole
            case ("create", _):
                type = "create"
                fields = previousFields.merging(fields) { _, new in new }
                changed = Array(Set(previousChanged).union(changed)).sorted()
            case ("delete", _):
                break  // cannot happen: a deleted card's task is re-created with a create
            default:
                fields = previousFields.merging(fields) { _, new in new }
                changed = Array(Set(previousChanged).union(changed)).sorted()
                type = changed == [SyncField.completed] && fields[SyncField.completed] == .bool(true) ? "complete" : "update"
            }
        }
        try db.execute(
            sql: """
                INSERT INTO pending_changes (account_id, sync_list_id, change_type, changed_fields, fields, trello_card_id, trello_action_id, created_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                o.accountID, o.syncListID, type, JSONValue.array(changed.map(JSONValue.string)).canonicalJSON,
                JSONValue.object(fields).canonicalJSON, o.cardID, o.actionID, now,
            ])
        written += 1
    }
}
