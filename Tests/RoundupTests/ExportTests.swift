import Foundation
import NIOHTTP1
import RoundupCore
import RoundupStore
import RoundupTesting
import Testing

/// `GET /dailyroundup/account/export` and `roundupctl accounts export`: an account's whole data, secrets masked, and
/// nothing of anyone else's.
@Suite(.serialized) struct ExportTests {
    static let apiKey = "apikey-of-a-0123456789abcdef"
    static let trelloToken = "token-of-a-0123456789abcdef0123456789"
    static let webhookSecret = "secret-of-a-0123456789abcdef"
    static let apnsToken = String(repeating: "ab", count: 32)

    func account(_ stack: Stack) async throws -> (id: String, token: String) {
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: SyncSetup.bootstrap)
        #expect(created.status == .created, "\(created.body)")
        return (try #require(created.json["account_id"]?.stringValue), try #require(created.json["auth_token"]?.stringValue))
    }

    @Test(arguments: StoreBackend.available) func anExportHoldsEveryKindOfRowOfItsAccountAndNothingOfAnother(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let store = try await stack.store()
        let a = try await account(stack)
        let b = try await account(stack)

        // A: credentials, a list with settings, a device, two cards (a pending change and a mapping each), a conflict, a
        // possible duplicate, and their activity.
        try await store.updateAccountCredentials(id: a.id, apiKey: Self.apiKey, token: Self.trelloToken, webhookSecret: Self.webhookSecret)
        let settings = try SyncSettings(
            json: try JSONParser.parse(Array(#"{"direction":"trello_to_reminders","filter":{"open_only":true}}"#.utf8)), over: .default)
        let list = try await store.createSyncList(
            accountID: a.id, name: "List of A", trelloBoardID: "BoardOfA", trelloListID: "ListOfA", settings: settings)
        _ = try await store.upsertDevice(accountID: a.id, deviceID: "phone-of-a", apnsToken: Self.apnsToken, platform: .ios, environment: .sandbox)
        for card in ["CardOfA1", "CardOfA2"] {
            _ = try await store.apply([
                CardObservation(
                    accountID: a.id, syncListID: list.id, cardID: card, actionID: "action-\(card)", actionDate: Date(),
                    kind: .fields(["title": .string("title of \(card)")], full: true))
            ])
        }
        var write = SyncWrite(accountID: a.id, syncListID: list.id, cardID: "CardOfA2", reminderID: "reminder-of-a")
        write.conflicts = [NewConflict(field: "notes", trelloValue: "notes of A (Trello)", remindersValue: "notes of A (app)")]
        write.activity = [
            NewActivity(
                kind: .conflict, syncListID: list.id, cardID: "CardOfA2", reminderID: "reminder-of-a", side: .reminders, field: "notes",
                oldValue: "notes of A (app)", newValue: "notes of A (Trello)", rule: .manual, kept: .trello)
        ]
        _ = try await store.recordSyncWrite(write)
        _ = try await store.addDuplicate(
            accountID: a.id,
            NewDuplicate(
                syncListID: list.id, reminderID: "duplicate-of-a", cardID: "CardOfA1", title: "title of CardOfA1", dueDate: nil,
                fields: ["title": "title of CardOfA1"], jobID: nil))
        // B: a list, a card and a device of its own.
        let listOfB = try await store.createSyncList(accountID: b.id, name: "List of B", trelloBoardID: "BoardOfB", trelloListID: "ListOfB")
        _ = try await store.apply([
            CardObservation(
                accountID: b.id, syncListID: listOfB.id, cardID: "CardOfB", actionID: "action-of-b", actionDate: Date(),
                kind: .fields(["title": "title of B"], full: true))
        ])
        _ = try await store.upsertDevice(
            accountID: b.id, deviceID: "phone-of-b", apnsToken: String(repeating: "cd", count: 32), platform: .macos, environment: .production)

        let response = try await stack.callAPI(.GET, "/dailyroundup/account/export", token: a.token)
        #expect(response.status == .ok, "\(response.body)")
        let export = response.json
        #expect(export["format"] == "roundup-export/1" && export["account"]?["account_id"]?.stringValue == a.id, "\(response.body)")
        // Secrets masked: the last four characters at most.
        for secret in [Self.apiKey, Self.trelloToken, Self.webhookSecret, Self.apnsToken, a.token] {
            #expect(!response.body.contains(secret), "the export shows a secret")
        }
        #expect(export["account"]?["trello_token"]?.stringValue?.hasSuffix(String(Self.trelloToken.suffix(4))) == true)
        // Every kind of row.
        let lists = export["lists"]?.arrayValue ?? []
        #expect(lists.count == 1 && lists.first?["sync_list_id"]?.stringValue == list.id)
        #expect(lists.first?["settings"]?["direction"] == "trello_to_reminders" && lists.first?["settings"]?["filter"]?["open_only"] == .bool(true))
        let devices = export["devices"]?.arrayValue ?? []
        #expect(
            devices.count == 1 && devices.first?["device_id"] == "phone-of-a" && devices.first?["apns_token"]?.stringValue?.hasSuffix("abab") == true)
        let mappings = export["mappings"]?.arrayValue ?? []
        #expect(Set(mappings.compactMap { $0["trello_card_id"]?.stringValue }) == ["CardOfA1", "CardOfA2"], "\(mappings)")
        #expect(mappings.contains { $0["trello_card_id"] == "CardOfA2" && $0["reminder_id"] == "reminder-of-a" })
        let changes = export["pending_changes"]?.arrayValue ?? []
        #expect(Set(changes.compactMap { $0["trello_card_id"]?.stringValue }) == ["CardOfA1", "CardOfA2"], "\(changes)")
        #expect(changes.contains { $0["fields"]?["title"] == "title of CardOfA1" && $0["change_type"] == "create" })
        let conflicts = export["conflicts"]?.arrayValue ?? []
        #expect(conflicts.count == 1 && conflicts.first?["trello_value"] == "notes of A (Trello)" && conflicts.first?["status"] == "open")
        let duplicates = export["duplicates"]?.arrayValue ?? []
        #expect(duplicates.count == 1 && duplicates.first?["reminder_id"] == "duplicate-of-a")
        let activity = export["activity"]?.arrayValue ?? []
        #expect(Set(activity.compactMap { $0["kind"]?.stringValue }) == ["create", "conflict"], "\(activity)")
        #expect(activity.contains { $0["kind"] == "conflict" && $0["rule"] == "manual" && $0["kept"] == "trello" })
        // Nothing of B's.
        for marker in [b.id, listOfB.id, "CardOfB", "title of B", "phone-of-b", "action-of-b"] {
            #expect(!response.body.contains(marker), "A's export shows B's \(marker)")
        }

        // roundupctl writes the same document, and refuses an account that does not exist.
        // (Compared from the file: the test reads the process's standard output and error together, and a warning
        // logged on standard error, such as a slow database connection, is not part of the document.)
        let ctl = try await RoundupCtlTests().run(stack, ["accounts", "export", a.id])
        #expect(ctl.code == 0 && ctl.output.contains(a.id) && ctl.output.contains("roundup-export/1"), "\(ctl.output)")
        let file = stack.directory.appendingPathComponent("export-a.json")
        #expect(try await RoundupCtlTests().run(stack, ["accounts", "export", a.id, "--output", file.path]).code == 0)
        let written = try JSONParser.parse(Array(try Data(contentsOf: file)))
        #expect(written["account"]?["account_id"]?.stringValue == a.id)
        var fromCtl = written.objectValue ?? [:]
        var fromAPI = export.objectValue ?? [:]
        #expect(fromCtl["exported_at"]?.stringValue != nil)
        fromCtl["exported_at"] = nil
        fromAPI["exported_at"] = nil
        #expect(JSONValue.object(fromCtl) == JSONValue.object(fromAPI))
        #expect((try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? Int) == 0o600)
        let missing = try await RoundupCtlTests().run(stack, ["accounts", "export", "no-such-account"])
        #expect(missing.code != 0 && missing.output.contains("no account no-such-account"), "\(missing.output)")

        // Deleting the account deletes its history with it, and nothing of B's.
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/account", token: a.token).status == .noContent)
        #expect(try await store.activity(accountID: a.id, ActivityQuery()).isEmpty)
        #expect(try await store.activity(accountID: b.id, ActivityQuery()).count == 1)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/account/export", token: a.token).status == .unauthorized)
        await stack.shutdown()
    }
}
