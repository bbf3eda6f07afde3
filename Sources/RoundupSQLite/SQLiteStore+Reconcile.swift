import Foundation
import GRDB
public import RoundupCore
public import RoundupStore

extension SQLiteStore: ReconcileStore {
    public func allSyncLists() async throws -> [(list: SyncListRecord, needsAttention: Bool)] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT l.id, l.account_id, l.name, l.trello_board_id, l.trello_list_id, l.list_webhook_id, l.board_webhook_id, l.created_at,
                           l.last_reconciled_at, l.last_reconcile_error, a.needs_attention IS NOT NULL, l.settings, l.trello_list_name, l.archived_at
                    FROM sync_lists l JOIN accounts a ON a.id = l.account_id ORDER BY l.created_at, l.id
                    """
            ).map { row in
                (
                    SyncListRecord(
                        id: row[0], accountID: row[1], name: row[2], trelloBoardID: row[3], trelloListID: row[4], listWebhookID: row[5],
                        boardWebhookID: row[6], createdAt: row[7], lastReconciledAt: row[8], lastReconcileError: row[9],
                        settings: SyncSettings(stored: row[11]), trelloListName: row[12], archivedAt: row[13]), row[10]
                )
            }
        }
    }

    public func markReconciled(syncListID: String, succeeded: Bool, error: String?) async throws {
        let now = Timestamp.now()
        try await pool.write { db in
            if succeeded {
                try db.execute(
                    sql: "UPDATE sync_lists SET last_reconciled_at = ?, last_reconcile_error = ? WHERE id = ?", arguments: [now, error, syncListID])
            } else {
                try db.execute(sql: "UPDATE sync_lists SET last_reconcile_error = ? WHERE id = ?", arguments: [error, syncListID])
            }
        }
    }

    @discardableResult
    public func setNeedsAttention(accountID: String, reason: AttentionReason?, whileToken: String?) async throws -> Bool {
        try await pool.write { db in
            guard
                let row = try Row.fetchOne(db, sql: "SELECT trello_token FROM accounts WHERE id = ?", arguments: [accountID]),
                AttentionFlag.applies(storedToken: try row.optionalText(0), whileToken: whileToken)
            else { return false }
            try db.execute(sql: "UPDATE accounts SET needs_attention = ? WHERE id = ?", arguments: [reason, accountID])
            return true
        }
    }

    public func liveCardIDs(accountID: String, syncListID: String) async throws -> [String] {
        try await pool.read { db in
            try Row.fetchAll(
                db, sql: "SELECT trello_card_id, deleted FROM sync_tasks WHERE account_id = ? AND sync_list_id = ?",
                arguments: [accountID, syncListID]
            ).compactMap { row in
                let card: String = try row.text(0)
                return SyncTaskRecord.isLive(cardID: card, deleted: try row.bool(1)) ? card : nil
            }
        }
    }

    public func replaceWebhook(accountID: String, old: String?, new: String, board: Bool, syncListID: String) async throws {
        let column = board ? "board_webhook_id" : "list_webhook_id"
        try await pool.write { db in
            try db.execute(sql: "UPDATE sync_lists SET \(column) = ?, updated_at = ? WHERE id = ?", arguments: [new, Timestamp.now(), syncListID])
            if let old {
                try db.execute(sql: "UPDATE sync_lists SET \(column) = ? WHERE account_id = ? AND \(column) = ?", arguments: [new, accountID, old])
            }
        }
    }
}
