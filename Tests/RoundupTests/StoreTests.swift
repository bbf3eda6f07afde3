import Foundation
import RoundupCore
import RoundupPostgres
import RoundupSQLite
import RoundupStore
import RoundupTesting
import Testing

/// A fresh store of a back end (a SQLite file, or a PostgreSQL database: see `TestStore`) with one account and one
/// synced list.
struct StoreFixture {
    let store: any ServerStore
    let url: String
    let account: String
    let list: SyncListRecord

    init(_ backend: StoreBackend, listID: String = "list-1", boardID: String = "board-1") async throws {
        (store, url) = try await TestStore.make(backend, "store")
        account = try await store.createAccount(authTokenHash: UUID().uuidString)
        try await store.updateAccountCredentials(id: account, apiKey: "test-api-key", token: "test-token", webhookSecret: "secret")
        list = try await store.createSyncList(accountID: account, name: "Groceries", trelloBoardID: boardID, trelloListID: listID)
    }

    func observe(
        _ card: String, _ kind: CardObservation.Kind, at seconds: Double = 1_700_000_000, action: String = UUID().uuidString
    ) async throws -> Int {
        try await store.apply([
            CardObservation(
                accountID: account, syncListID: list.id, cardID: card, actionID: action, actionDate: Date(timeIntervalSince1970: seconds), kind: kind)
        ]).written
    }

    func changes() async throws -> [PendingChange] {
        try await store.pendingChanges(accountID: account, afterID: 0, limit: 1000)
    }
}

func fullCard(_ title: String, completed: Bool = false) -> [String: JSONValue] {
    CardMapper.fields(fromCard: ["name": .string(title), "desc": .string("d"), "dueComplete": .bool(completed)])
}

@Suite struct StoreTests {
    /// The seed's sixteen tables and `activity`, but the six that were never used (v12 drops them: docs/WEBHOOKS.md, "The path of one webhook").
    @Test(arguments: StoreBackend.available) func migrationsCreateTheElevenTables(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        let tables = try await f.store.tableNames()
        #expect(
            Set(tables) == [
                "accounts", "sync_lists", "sync_tasks", "pending_changes", "devices", "conflicts", "sync_custom_fields", "sync_lease",
                "background_jobs", "potential_duplicates", "activity",
            ])
        if let sqlite = f.store as? SQLiteStore { #expect(try await sqlite.journalMode() == "wal") }
        if let postgres = f.store as? PostgresStore {
            #expect(
                try await postgres.appliedMigrations() == [
                    "v1-reference-schema", "v2-superseded-changes", "v3-sync-jobs", "v4-reconciliation", "v5-resolution-claims",
                    "v6-webhook-callback-tokens", "v7-list-settings", "v8-activity", "v9-device-apps",
                    "v10-changes-by-card-and-id", "v11-changes-carry-reminder", "v12-drop-unused-card-tables", "v13-several-devices",
                    "v14-declined-and-moved-changes", "v15-card-values-and-list-state",
                ])
        }
        try await f.store.migrate()  // a second run changes nothing and does not fail
        #expect(try await f.store.tableNames().count == 11)
    }

    @Test(arguments: StoreBackend.available) func createThenRedeliveryWritesOneChange(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        #expect(try await f.observe("c1", .fields(fullCard("Milk"), full: true)) == 1)
        #expect(try await f.observe("c1", .fields(fullCard("Milk"), full: true)) == 0)
        let changes = try await f.changes()
        #expect(changes.count == 1)
        #expect(changes[0].changeType == .create)
        #expect(changes[0].fields["title"] == .string("Milk"))
        #expect(Set(changes[0].changedFields) == Set(SyncField.names))
    }

    @Test(arguments: StoreBackend.available) func updatesCompareHashesAndSupersedeUnackedChanges(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        _ = try await f.observe("c1", .fields(fullCard("Milk"), full: true))
        let created = try await f.changes()[0]
        // An edit before the app acked the create folds into it: one row, a new id, still a create.
        _ = try await f.observe("c1", .fields(["title": .string("Oat milk")], full: false), at: 1_700_000_010)
        var changes = try await f.changes()
        #expect(changes.count == 1)
        #expect(changes[0].id > created.id)
        #expect(changes[0].changeType == .create)
        #expect(changes[0].fields["title"] == .string("Oat milk"))
        #expect(try await f.store.acknowledge(accountID: f.account, acks: [ChangeAck(id: changes[0].id)]) == .acked([changes[0].id]))
        #expect(try await f.changes().isEmpty)
        // Acking the superseded id again is harmless.
        #expect(try await f.store.acknowledge(accountID: f.account, acks: [ChangeAck(id: created.id)]) == .acked([created.id]))

        // Same value again: nothing written. A new value: an update of that field only.
        #expect(try await f.observe("c1", .fields(["title": .string("Oat milk")], full: false), at: 1_700_000_020) == 0)
        #expect(try await f.observe("c1", .fields(["notes": .string("2 litres")], full: false), at: 1_700_000_030) == 1)
        changes = try await f.changes()
        #expect(changes.map(\.changeType) == [.update])
        #expect(changes[0].changedFields == ["notes"])
        // Then completion: merged into the unacked update, changed fields are the union.
        _ = try await f.observe("c1", .fields(["completed": .bool(true)], full: false), at: 1_700_000_040)
        changes = try await f.changes()
        #expect(changes.count == 1)
        #expect(changes[0].changeType == .update)
        #expect(changes[0].changedFields == ["completed", "notes"])
    }

    @Test(arguments: StoreBackend.available) func completionAloneIsAComplete(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        _ = try await f.observe("c1", .fields(fullCard("Milk"), full: true))
        _ = try await f.store.acknowledge(accountID: f.account, acks: try await f.changes().map { ChangeAck(id: $0.id) })
        _ = try await f.observe("c1", .fields(["completed": .bool(true)], full: false), at: 1_700_000_100)
        let changes = try await f.changes()
        #expect(changes.map(\.changeType) == [.complete])
        #expect(changes[0].changedFields == ["completed"])
    }

    @Test(arguments: StoreBackend.available) func olderActionsDoNotOverwriteNewerFields(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        _ = try await f.observe("c1", .fields(fullCard("Milk"), full: true), at: 1_700_000_000)
        _ = try await f.store.acknowledge(accountID: f.account, acks: try await f.changes().map { ChangeAck(id: $0.id) })
        _ = try await f.observe("c1", .fields(["title": .string("Newest")], full: false), at: 1_700_000_200)
        // Delivered late: an earlier rename must not win.
        #expect(try await f.observe("c1", .fields(["title": .string("Older")], full: false), at: 1_700_000_100) == 0)
        #expect(try await f.changes().last?.fields["title"] == .string("Newest"))
    }

    @Test(arguments: StoreBackend.available) func deleteAndCreateThenDelete(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        _ = try await f.observe("c1", .fields(fullCard("Milk"), full: true))
        _ = try await f.store.acknowledge(accountID: f.account, acks: try await f.changes().map { ChangeAck(id: $0.id) })
        #expect(try await f.observe("c1", .removed) == 1)
        #expect(try await f.changes().map(\.changeType) == [.delete])
        #expect(try await f.observe("c1", .removed) == 0)  // redelivered: nothing new

        // A card created and deleted before the app acked the create: one delete (the app may have applied the create).
        _ = try await f.observe("c2", .fields(fullCard("Eggs"), full: true))
        _ = try await f.observe("c2", .removed)
        #expect(try await f.changes().filter { $0.trelloCardID == "c2" }.map(\.changeType) == [.delete])
    }

    @Test(arguments: StoreBackend.available) func accountsSeeOnlyTheirOwnChanges(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        let other = try await f.store.createAccount(authTokenHash: "other")
        _ = try await f.observe("c1", .fields(fullCard("Milk"), full: true))
        let mine = try await f.changes()
        #expect(try await f.store.pendingChanges(accountID: other, afterID: 0, limit: 100).isEmpty)
        #expect(try await f.store.acknowledge(accountID: other, acks: mine.map { ChangeAck(id: $0.id) }) == .notFound(mine[0].id))
        #expect(try await f.changes().count == 1)
    }

    @Test(arguments: StoreBackend.available) func routingSnapshotHasSecretsAndBothModels(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend, listID: "L", boardID: "B")
        let snapshot = try await f.store.routingSnapshot()
        #expect(snapshot.secrets[f.account] == "secret")
        #expect(snapshot.routes["L"] == [f.account])
        #expect(snapshot.routes["B"] == [f.account])
        // Every account has a callback token of its own, 64 hex characters.
        let token = try #require(snapshot.tokens[f.account])
        #expect(WebhookCallback.isToken(token))
        #expect(try await f.store.account(id: f.account)?.webhookToken == token)
    }

    @Test(arguments: StoreBackend.available) func aLateRemovalDoesNotDeleteACardSeenSince(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        _ = try await f.observe("c1", .fields(fullCard("Milk"), full: true), at: 1_700_000_100)
        _ = try await f.store.acknowledge(accountID: f.account, acks: try await f.changes().map { ChangeAck(id: $0.id) })
        // "Moved out" at t=50 arrives after the card was seen in the list at t=100.
        #expect(try await f.observe("c1", .removed, at: 1_700_000_050) == 0)
        #expect(try await f.changes().isEmpty)
        // A real removal later still counts, and an older create delivered after it does not bring the card back.
        #expect(try await f.observe("c1", .removed, at: 1_700_000_200) == 1)
        #expect(try await f.observe("c1", .fields(fullCard("Milk"), full: true), at: 1_700_000_150) == 0)
        #expect(try await f.changes().map(\.changeType) == [.delete])
    }

    @Test(arguments: StoreBackend.available) func ackingTheOlderCreateTurnsTheNewerOneIntoAnUpdate(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        _ = try await f.observe("c1", .fields(fullCard("Milk"), full: true), at: 1_700_000_000)
        let older = try #require(try await f.changes().first)
        // The app pulled the create and made a reminder; meanwhile an edit folded the create into a newer one.
        _ = try await f.observe("c1", .fields(["title": .string("Oat milk")], full: false), at: 1_700_000_010)
        #expect(try await f.store.acknowledge(accountID: f.account, acks: [ChangeAck(id: older.id, reminderID: "R-9")]) == .acked([older.id]))
        let newer = try #require(try await f.changes().first)
        #expect(newer.changeType == .update)
        #expect(newer.reminderID == "R-9")
        #expect(newer.fields["title"] == .string("Oat milk"))
    }
}
