import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupTesting
import Testing

/// Moves both ways, through the real processes and the fake Trello: a card dragged between two
/// synced lists, within a board or to another board's, reaches the apps as one `move` of the same reminder; to an
/// unsynced list it is a delete, from one a create; a reminder moved in the apps moves the same card, with no echo;
/// a target list that keeps Trello's side moves nothing and says why.
@Suite(.serialized) struct MovesTests {
    func pair(_ s: SyncSetup, name: String, list: String, board: String, settings: String? = nil) async throws -> String {
        s.stack.trello.addList(id: list, boardID: board)
        var body = #"{"name":"\#(name)","trello_board_id":"\#(board)","trello_list_id":"\#(list)""#
        if let settings { body += #","settings":\#(settings)"# }
        body += "}"
        let response = try await s.stack.callAPI(.POST, "/dailyroundup/lists", token: s.token, body: body)
        #expect(response.status == .created, "\(response.body)")
        return try #require(response.json["sync_list_id"]?.stringValue)
    }

    /// The changes of `card` waiting for the apps, acked (a create with `reminder`).
    func changes(_ s: SyncSetup, card: String, reminder: String = "R-move") async throws -> [JSONValue] {
        try await s.stack.quiet()
        let all = try await s.changes()
        try await s.ack(all, reminders: [card: reminder])
        return all.filter { $0["trello_card_id"]?.stringValue == card }
    }

    func move(_ s: SyncSetup, to list: String, fields: [String: JSONValue] = [:], changed: [String]? = nil) -> JSONValue {
        var change = s.change("move", reminder: "R-move", fields: fields, changed: changed)
        if case .object(var object) = change {
            object["sync_list_id"] = .string(list)
            change = .object(object)
        }
        return change
    }

    @Test(arguments: StoreBackend.available) func aMoveStaysAMoveBothWays(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let s = try await SyncSetup.make(stack, list: "Ltoday", board: "Bhome", policy: "lww")
        let today = s.listID
        let later = try await pair(s, name: "Later", list: "Llater", board: "Bhome")
        let work = try await pair(s, name: "Work", list: "Lwork", board: "Bwork")
        let readOnly = try await pair(s, name: "Inbox", list: "Linbox", board: "Bhome", settings: #"{"direction":"trello_to_reminders"}"#)
        stack.trello.addList(id: "Lsomeday", boardID: "Bhome")  // not synced
        try await stack.quiet()
        try await s.ack(try await s.changes())

        let card = stack.trello.userCreateCard(listID: "Ltoday", name: "Call the plumber", desc: "about the boiler")
        let created = try await changes(s, card: card)
        #expect(created.map { $0["change_type"] } == ["create"], "\(created)")

        // Dragged in Trello to another synced list of the board: one move, the same reminder, every field.
        stack.trello.userUpdateCard(id: card, ["idList": "Llater"])
        let within = try await changes(s, card: card)
        #expect(within.count == 1, "\(within)")
        #expect(within.first?["change_type"] == "move" && within.first?["reminder_id"] == "R-move", "\(within)")
        #expect(within.first?["sync_list_id"]?.stringValue == later && within.first?["from_sync_list_id"]?.stringValue == today, "\(within)")
        #expect(within.first?["fields"]?["title"] == "Call the plumber" && within.first?["fields"]?["notes"] == "about the boiler", "\(within)")

        // To another board's synced list: one move too (whichever board's webhook comes first).
        stack.trello.userUpdateCard(id: card, ["idList": "Lwork"])
        let across = try await changes(s, card: card)
        #expect(across.count == 1 && across.first?["change_type"] == "move", "\(across)")
        #expect(across.first?["sync_list_id"]?.stringValue == work && across.first?["from_sync_list_id"]?.stringValue == later, "\(across)")

        // To a list nobody syncs: a delete; back from it into a synced list: a create.
        stack.trello.userUpdateCard(id: card, ["idList": "Lsomeday"])
        let out = try await changes(s, card: card)
        #expect(out.map { $0["change_type"] } == ["delete"], "\(out)")
        stack.trello.userUpdateCard(id: card, ["idList": "Ltoday"])
        let back = try await changes(s, card: card)
        #expect(back.map { $0["change_type"] } == ["create"] && back.first?["sync_list_id"]?.stringValue == today, "\(back)")

        // From the apps: the reminder moved to Later moves the same card, and nothing comes back.
        let cardsBefore = stack.trello.cardsCreated
        let moved = try await s.sync([move(s, to: later)])
        #expect(moved["results"]?[0]?["status"] == "ok" && moved["results"]?[0]?["op"] == "move", "\(moved)")
        #expect(moved["results"]?[0]?["trello_card_id"]?.stringValue == card)
        #expect(stack.trello.cardValue(card)?["idList"] == "Llater" && stack.trello.cardValue(card)?["closed"] == false)
        #expect(try await changes(s, card: card).isEmpty)

        // To another board's list, with an edit in the same item: both apply, still one card, no echo.
        let edited = try await s.sync([move(s, to: work, fields: ["title": "Call the plumber today"], changed: ["title"])])
        #expect(edited["results"]?[0]?["status"] == "ok", "\(edited)")
        #expect(stack.trello.cardValue(card)?["idList"] == "Lwork" && stack.trello.cardValue(card)?["idBoard"] == "Bwork")
        #expect(stack.trello.cardValue(card)?["name"] == "Call the plumber today")
        #expect(try await changes(s, card: card).isEmpty)
        #expect(stack.trello.cardsCreated == cardsBefore)

        // A list whose settings keep Trello's side takes no move from the apps: skipped, naming where the card stays.
        let refused = try await s.sync([move(s, to: readOnly)])
        #expect(refused["results"]?[0]?["status"] == "skipped", "\(refused)")
        #expect(refused["results"]?[0]?["reason"]?.stringValue?.contains("stays in \(work)") == true, "\(refused)")
        #expect(stack.trello.cardValue(card)?["idList"] == "Lwork")

        // The history tells each move as one event.
        let activity =
            try await stack.callAPI(.GET, "/dailyroundup/activity?trello_card_id=\(card)", token: s.token).json["activity"]?.arrayValue ?? []
        #expect(activity.filter { $0["kind"] == "move" }.count == 4, "\(activity.map { $0["kind"] ?? .null })")
        await stack.shutdown()
    }

    /// A card made from the apps and dragged in Trello at once (its create's webhook and its move's read after the
    /// move): one move of the reminder, never a delete.
    @Test(arguments: StoreBackend.available) func aCardMadeInTheAppsAndMovedAtOnceIsMoved(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startWorker(name: "w2")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let s = try await SyncSetup.make(stack, list: "Lnow", board: "Bquick", policy: "prefer_trello")
        let later = try await pair(s, name: "Later", list: "Lthen", board: "Bquick")
        try await stack.quiet()
        try await s.ack(try await s.changes())
        for round in 0..<5 {
            let made = try await s.sync([
                s.change(
                    "create", reminder: "R-quick-\(round)",
                    fields: [
                        "title": .string("Quick \(round)"),
                        "checklists": .array([.object(["name": "Steps", "items": .array([.object(["name": "one"])])])]),
                    ])
            ])
            let card = try #require(made["results"]?[0]?["trello_card_id"]?.stringValue, "\(made)")
            stack.trello.userUpdateCard(id: card, ["idList": "Lthen"])
            try await stack.quiet()
            let all = try await s.changes()
            try await s.ack(all)
            let mine = all.filter { $0["trello_card_id"]?.stringValue == card }
            #expect(mine.contains { $0["change_type"] == "move" && $0["sync_list_id"]?.stringValue == later }, "round \(round): \(mine)")
            #expect(!mine.contains { $0["change_type"] == "delete" }, "round \(round): \(mine)")
            if mine.contains(where: { $0["change_type"] == "delete" }) {
                let activity = try await stack.callAPI(.GET, "/dailyroundup/activity?trello_card_id=\(card)", token: s.token).body
                Issue.record("activity: \(activity)")
            }
        }
        await stack.shutdown()
    }

    /// A reconciliation of the list a card left, run before the move's webhook is applied (here: never delivered),
    /// finds the card in the account's other synced list: the apps get the move, not a delete that the move's older
    /// webhook could not undo.
    @Test(arguments: StoreBackend.available) func aReconciliationThatMissesAMovedCardFindsItWhereItWent(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let s = try await SyncSetup.make(stack, list: "Lleft", board: "Brec2")
        let other = try await pair(s, name: "Other", list: "Lwent", board: "Brec2")
        let card = stack.trello.userCreateCard(listID: "Lleft", name: "Wanderer")
        _ = try await changes(s, card: card)
        stack.trello.state.withLockedValue { $0.deliverWebhooks = false }
        stack.trello.userUpdateCard(id: card, ["idList": "Lwent"])
        let started = try await stack.callAPI(.POST, "/dailyroundup/lists/\(s.listID)/reconcile", token: s.token)
        #expect(started.status == .accepted, "\(started.body)")
        _ = try await s.wait(job: try #require(started.json["job_id"]?.stringValue))
        let seen = try await changes(s, card: card)
        #expect(seen.count == 1 && seen.first?["change_type"] == "move", "\(seen)")
        #expect(seen.first?["sync_list_id"]?.stringValue == other && seen.first?["from_sync_list_id"]?.stringValue == s.listID, "\(seen)")
        await stack.shutdown()
    }
}
