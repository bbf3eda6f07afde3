import Foundation
import Logging
import NIOHTTP1
import RoundupCore
import RoundupStore
import RoundupTesting
import RoundupWorker
import Testing

/// The activity history: every decision about an item, in the transaction that acts on it, paged for the apps.
@Suite(.serialized) struct ActivityTests {
    /// Ingress, one worker and the API, as the list-settings tests run them.
    func startStack(_ backend: StoreBackend) async throws -> Stack { try await ListSettingsTests().startStack(backend) }

    /// Every row the query selects, newest first, read in pages of `limit` (and checked to be pages: disjoint, in order).
    func activity(_ s: SyncSetup, _ query: String = "", limit: Int = 200) async throws -> [JSONValue] {
        var rows: [JSONValue] = []
        var before: String = ""
        while true {
            let response = try await s.stack.callAPI(
                .GET, "/dailyroundup/activity?limit=\(limit)\(before)\(query.isEmpty ? "" : "&" + query)", token: s.token)
            #expect(response.status == .ok, "\(response.body)")
            let page = response.json["activity"]?.arrayValue ?? []
            #expect(page.count <= limit)
            rows += page
            guard response.json["has_more"] == .bool(true), let next = response.json["next_before_id"]?.numberValue else {
                #expect(response.json["next_before_id"] == .null)
                break
            }
            #expect(page.last?["id"]?.numberValue == next)
            before = "&before_id=\(Int(next))"
        }
        let ids = rows.compactMap { $0["id"]?.numberValue }
        #expect(ids == ids.sorted(by: >) && Set(ids).count == ids.count, "newest first, each once: \(ids)")
        return rows
    }

    /// Trello's side and the app change the title, only the app the notes: the history holds the app's create, Trello's
    /// edit with the value before it, the app's notes edit, and one conflict row naming the policy and what was kept.
    @Test(arguments: StoreBackend.available, ConflictPolicy.allCases)
    func aConflictLeavesItsDecisionInTheHistoryUnderEachPolicy(backend: StoreBackend, policy: ConflictPolicy) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let tag = policy.rawValue.filter(\.isLetter)
        let s = try await SyncSetup.make(stack, list: "La\(tag)", board: "Ba\(tag)", policy: policy.rawValue)
        let created = try await s.sync([s.change("create", reminder: "R1", fields: ["title": "Pay rent", "notes": "by transfer"])])
        let card = try #require(created["results"]?[0]?["trello_card_id"]?.stringValue)
        try await stack.quiet()
        stack.trello.userUpdateCard(id: card, ["name": "Pay rent (Trello)"])
        try await stack.quiet()
        let result = try await s.sync([
            s.change("update", reminder: "R1", fields: ["title": "Pay rent (app)", "notes": "by card"], changed: ["title", "notes"])
        ])
        let job = try #require(result["id"]?.stringValue ?? result["job_id"]?.stringValue)
        // An item that fails leaves its error.
        let failed = try await s.sync([s.change("update", reminder: "R404", fields: ["title": "Nobody"], changed: ["title"])])
        #expect(failed["results"]?[0]?["status"] == "error")
        if policy == .manual {
            let conflicts = try await stack.callAPI(.GET, "/dailyroundup/conflicts", token: s.token).json["conflicts"]?.arrayValue ?? []
            let id = Int(try #require(conflicts.first?["id"]?.numberValue))
            let resolved = try await stack.callAPI(.POST, "/dailyroundup/conflicts/\(id)/resolve", token: s.token, body: #"{"choice":"reminders"}"#)
            #expect(resolved.status == .ok, "\(resolved.body)")
        }
        try await stack.quiet()

        let rows = try await activity(s, "reminder_id=R1", limit: 2)
        func has(_ kind: String, _ side: String?, _ field: String?, _ check: (JSONValue) -> Bool = { _ in true }) -> Bool {
            rows.contains { $0["kind"]?.stringValue == kind && $0["side"]?.stringValue == side && $0["field"]?.stringValue == field && check($0) }
        }
        #expect(
            has("create", "reminders", nil) { $0["trello_card_id"]?.stringValue == card && $0["new_value"]?["title"] == "Pay rent" },
            "\(rows)")
        #expect(
            has("change", "trello", "title") {
                $0["old_value"] == "Pay rent" && $0["new_value"] == "Pay rent (Trello)" && $0["trello_action_id"]?.stringValue != nil
            }, "\(rows)")
        #expect(
            has("change", "reminders", "notes") {
                $0["old_value"] == "by transfer" && $0["new_value"] == "by card" && $0["job_id"]?.stringValue == job
            },
            "\(rows)")
        let conflicts = rows.filter { $0["kind"] == "conflict" }
        #expect(conflicts.count == 1, "\(rows)")
        let conflict = try #require(conflicts.first)
        #expect(conflict["field"] == "title" && conflict["rule"]?.stringValue == policy.rawValue && conflict["side"] == "reminders")
        switch policy {
        case .manual, .preferTrello:
            #expect(conflict["kept"] == "trello" && conflict["new_value"] == "Pay rent (Trello)" && conflict["old_value"] == "Pay rent (app)")
        case .lww, .preferReminders:
            #expect(conflict["kept"] == "reminders" && conflict["new_value"] == "Pay rent (app)" && conflict["old_value"] == "Pay rent (Trello)")
        }
        if policy == .manual {
            #expect(conflict["message"]?.stringValue?.contains("open conflict") == true)
            #expect(has("resolved", nil, "title") { $0["kept"] == "reminders" && $0["new_value"] == "Pay rent (app)" }, "\(rows)")
        }
        // Our own writes coming back from Trello are never Trello's changes.
        #expect(!has("change", "trello", "title") { $0["new_value"] == "Pay rent (app)" }, "\(rows)")
        #expect(!has("change", "trello", "notes"), "\(rows)")

        // The other filters select the same card's rows; the error is the failed reminder's.
        let byCard = try await activity(s, "trello_card_id=\(card)")
        let byList = try await activity(s, "sync_list_id=\(s.listID)")
        #expect(Set(byCard.map { $0["id"] }) == Set(rows.map { $0["id"] }))
        #expect(Set(rows.map { $0["id"] }).isSubset(of: Set(byList.map { $0["id"] })))
        let errors = try await activity(s, "reminder_id=R404")
        #expect(errors.count == 1 && errors.first?["kind"] == "error" && errors.first?["side"] == "reminders", "\(errors)")
        #expect(errors.first?["message"]?.stringValue?.isEmpty == false && errors.first?["new_value"] == "Nobody")

        // Another account sees none of it, whatever it asks for.
        let other = try await SyncSetup.make(stack, list: "Lo\(tag)", board: "Bo\(tag)")
        #expect(try await activity(other).isEmpty)
        #expect(try await activity(other, "trello_card_id=\(card)").isEmpty)
        #expect(try await activity(other, "reminder_id=R1").isEmpty)
        await stack.shutdown()
    }

    /// Bad queries get a 400 or 422 with a JSON error; no token, a 401.
    @Test func badQueriesAreRefused() async throws {
        let stack = try await startStack(.sqlite)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lbad", board: "Bbad")
        for (query, status) in [
            ("limit=0", 422), ("limit=201", 422), ("limit=ten", 400), ("before_id=x", 400), ("before_id=0", 422),
            ("sync_list_id=", 422), ("trello_card_id=\(String(repeating: "a", count: 200))", 422),
        ] {
            let response = try await stack.callAPI(.GET, "/dailyroundup/activity?\(query)", token: s.token)
            #expect(Int(response.status.code) == status, "\(query): \(response.body)")
            #expect(response.json["error"]?["message"]?.stringValue?.isEmpty == false, "\(query): \(response.body)")
        }
        #expect(try await stack.callAPI(.GET, "/dailyroundup/activity", token: nil).status == .unauthorized)
        await stack.shutdown()
    }
}

/// The history in the store itself: what the change rules write, the filters, retention, and account deletion.
@Suite struct ActivityStoreTests {
    @Test(arguments: StoreBackend.available) func historyIsWrittenFilteredPrunedAndGoesWithItsAccount(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        let otherAccount = try await f.store.createAccount(authTokenHash: UUID().uuidString)
        let otherList = try await f.store.createSyncList(accountID: otherAccount, name: "Other", trelloBoardID: "board-2", trelloListID: "list-2")

        _ = try await f.observe("c1", .fields(fullCard("Milk"), full: true), at: 1_700_000_000, action: "a1")
        var edit = CardObservation(
            accountID: f.account, syncListID: f.list.id, cardID: "c1", actionID: "a2", actionDate: Date(timeIntervalSince1970: 1_700_000_010),
            kind: .fields(["title": "Oat milk"], full: false))
        edit.previous = ["title": "Milk"]
        _ = try await f.store.apply([edit])
        _ = try await f.observe("c1", .echo(["notes": "ours"]), at: 1_700_000_020, action: "a3")
        _ = try await f.observe("c1", .removed, at: 1_700_000_030, action: "a4")
        _ = try await f.observe("c2", .fields(fullCard("Bread"), full: true), at: 1_700_000_040, action: "a5")
        _ = try await f.store.apply([
            CardObservation(
                accountID: otherAccount, syncListID: otherList.id, cardID: "c9", actionID: "b1",
                actionDate: Date(timeIntervalSince1970: 1_700_000_000),
                kind: .fields(fullCard("Theirs"), full: true))
        ])

        let c1 = try await f.store.activity(accountID: f.account, ActivityQuery(cardID: "c1"))
        #expect(c1.map(\.kind) == [.delete, .echo, .change, .create])
        #expect(c1.allSatisfy { $0.side == .trello && $0.syncListID == f.list.id && $0.accountID == f.account })
        #expect(c1.map(\.trelloActionID) == ["a4", "a3", "a2", "a1"])
        #expect(c1[1].field == "notes" && c1[1].newValueJSON == #""ours""#)
        #expect(c1[2].field == "title" && c1[2].oldValueJSON == #""Milk""# && c1[2].newValueJSON == #""Oat milk""#)
        #expect(c1[3].newValueJSON.flatMap { try? JSONParser.parse(Array($0.utf8)) }?["title"] == "Milk")
        // Pages: newest first, `beforeID` continues.
        let all = try await f.store.activity(accountID: f.account, ActivityQuery())
        #expect(all.count == 5 && all.map(\.id) == all.map(\.id).sorted(by: >))
        let first = try await f.store.activity(accountID: f.account, ActivityQuery(limit: 2))
        let second = try await f.store.activity(accountID: f.account, ActivityQuery(beforeID: first.last?.id, limit: 10))
        #expect((first + second).map(\.id) == all.map(\.id))
        #expect(try await f.store.activity(accountID: f.account, ActivityQuery(syncListID: otherList.id)).isEmpty)
        #expect(try await f.store.activity(accountID: otherAccount, ActivityQuery()).map(\.cardID) == ["c9"])

        // Deleting an account deletes its history, and only its.
        _ = try await f.store.deleteAccount(id: otherAccount)
        #expect(try await f.store.activity(accountID: otherAccount, ActivityQuery()).isEmpty)
        #expect(try await f.store.activity(accountID: f.account, ActivityQuery()).count == 5)

        // Retention: nothing is older than 30 days yet; 31 days on, everything is, deleted two rows at a time.
        let pruner = ActivityPruner(store: f.store, retentionDays: 30, batch: 2, logger: Logger(label: "test"))
        #expect(try await pruner.prune() == 0)
        #expect(try await f.store.pruneActivity(before: Date().addingTimeInterval(86_400), batch: 2) == 2)
        #expect(try await pruner.prune(now: Date().addingTimeInterval(31 * 86_400)) == 3)
        #expect(try await f.store.activity(accountID: f.account, ActivityQuery()).isEmpty)
    }
}
