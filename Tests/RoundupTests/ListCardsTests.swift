import Foundation
import NIOHTTP1
import RoundupCore
import RoundupTesting
import Testing

@testable import RoundupStore

/// A new device starts from the truth: `GET /dailyroundup/lists/{id}/cards` answers, from the store
/// alone, every live card of the list with its reminder and every field as a create carries it, as Trello's edits and
/// the apps' writes left them; paged by a cursor, each card once.
@Suite(.serialized) struct ListCardsTests {
    /// Every page of the list's cards, `limit` at a time.
    func allCards(_ s: SyncSetup, limit: Int = 200) async throws -> [JSONValue] {
        var cards: [JSONValue] = []
        var cursor: String?
        for _ in 0..<100 {
            let path = "/dailyroundup/lists/\(s.listID)/cards?limit=\(limit)" + (cursor.map { "&cursor=\($0)" } ?? "")
            let response = try await s.stack.callAPI(.GET, path, token: s.token)
            #expect(response.status == .ok, "\(response.body)")
            #expect(response.json["sync_list_id"]?.stringValue == s.listID)
            cards += response.json["cards"]?.arrayValue ?? []
            guard let next = response.json["next_cursor"]?.stringValue else { return cards }
            cursor = next
        }
        Issue.record("the cards' pages never ended")
        return cards
    }

    func card(_ cards: [JSONValue], _ id: String) -> JSONValue? { cards.first { $0["trello_card_id"]?.stringValue == id } }

    @Test(arguments: StoreBackend.available) func aNewDeviceRebuildsTheListFromItsCards(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let s = try await SyncSetup.make(stack, list: "Lcards", board: "Bcards", policy: "lww")
        stack.trello.setBoardLabels(boardID: "Bcards", [("lab-red", "Urgent", "red")])

        // Trello's side: cards with labels, a checklist, a link, a due date.
        let plumber = stack.trello.userCreateCard(
            listID: "Lcards", name: "Call the plumber", desc: "about the boiler", due: "2026-12-03T09:30:00.000Z")
        stack.trello.userSetLabel(cardID: plumber, labelID: "lab-red", on: true)
        stack.trello.userAddChecklist(cardID: plumber, name: "Before", items: ["find the number", "clear the hall"])
        _ = stack.trello.userAddAttachment(cardID: plumber, url: "https://example.com/boiler", name: "manual")
        var cardIDs = [plumber]
        for n in 1...4 { cardIDs.append(stack.trello.userCreateCard(listID: "Lcards", name: "Errand \(n)")) }
        try await stack.quiet()
        let pulled = try await s.changes()
        try await s.ack(pulled, reminders: Dictionary(uniqueKeysWithValues: cardIDs.enumerated().map { ($1, "R-\($0)") }))

        // The new device: every card once, its reminder, the fields its latest state holds (as one create of it would).
        let first = try await allCards(s, limit: 2)
        #expect(first.count == 5, "\(first)")
        #expect(Set(first.compactMap { $0["trello_card_id"]?.stringValue }) == Set(cardIDs))
        let one = try #require(card(first, plumber))
        #expect(one["reminder_id"] == "R-0")
        let fields = try #require(one["fields"]?.objectValue)
        #expect(fields["title"] == "Call the plumber" && fields["notes"] == "about the boiler", "\(fields)")
        #expect(fields["due_date"]?.stringValue?.hasPrefix("2026-12-03T09:30:00") == true, "\(fields)")
        #expect(fields["labels"]?[0]?["name"] == "Urgent" && fields["labels"]?[0]?["id"] == "lab-red", "\(fields)")
        #expect(fields["checklists"]?[0]?["items"]?.arrayValue?.count == 2, "\(fields)")
        #expect(fields["url"] == "https://example.com/boiler", "\(fields)")
        #expect(fields["trello_url"]?.stringValue?.isEmpty == false && fields["start_date"] == .null && fields["completed"] == false, "\(fields)")
        // The same as every field the pulled changes carried, merged in order (what a device that saw them all knows).
        var seen: [String: JSONValue] = [:]
        for change in pulled where change["trello_card_id"]?.stringValue == plumber {
            for (key, value) in change["fields"]?.objectValue ?? [:] { seen[key] = value }
        }
        #expect(seen == fields, "pulled \(seen) listed \(fields)")

        // The apps write: a new title and an all-day due date (a day comes back as that day).
        let job = try await s.sync([
            s.change(
                "update", reminder: "R-0", fields: ["title": "Call the plumber today", "due_date": "2026-12-04"], changed: ["title", "due_date"])
        ])
        #expect(job["status"] == "completed" && job["results"]?[0]?["status"] == "ok", "\(job)")
        // Trello's side edits another card; one card goes; one new card waits for the apps.
        stack.trello.userUpdateCard(id: cardIDs[1], ["desc": "milk and eggs"])
        stack.trello.userDeleteCard(id: cardIDs[2])
        let fresh = stack.trello.userCreateCard(listID: "Lcards", name: "Not yet on any device")
        try await stack.quiet()

        let second = try await allCards(s, limit: 3)
        #expect(second.count == 5, "\(second.map { $0["trello_card_id"] })")
        #expect(card(second, cardIDs[2]) == nil, "a deleted card is not listed")
        let written = try #require(card(second, plumber)?["fields"])
        #expect(written["title"] == "Call the plumber today" && written["due_date"] == "2026-12-04", "\(written)")
        #expect(written["labels"]?[0]?["id"] == "lab-red", "fields the app did not write keep their values: \(written)")
        #expect(card(second, cardIDs[1])?["fields"]?["notes"] == "milk and eggs")
        #expect(card(second, fresh)?["reminder_id"] == .null && card(second, fresh)?["fields"]?["title"] == "Not yet on any device")

        // Bad requests are told what is wrong.
        let badCursor = try await stack.callAPI(.GET, "/dailyroundup/lists/\(s.listID)/cards?cursor=abc", token: s.token)
        #expect(badCursor.status == .badRequest && badCursor.json["error"]?["message"]?.stringValue?.contains("cursor") == true, "\(badCursor.body)")
        let badLimit = try await stack.callAPI(.GET, "/dailyroundup/lists/\(s.listID)/cards?limit=0", token: s.token)
        #expect(badLimit.status == .unprocessableEntity, "\(badLimit.body)")
        let unknown = try await stack.callAPI(.GET, "/dailyroundup/lists/sl_nope/cards", token: s.token)
        #expect(unknown.status == .notFound, "\(unknown.body)")
    }
}

/// The values behind the list's cards, on both stores: each write sets the fields it knows over the stored ones, whole.
@Suite struct CardValuesStoreTests {
    @Test(arguments: StoreBackend.available) func eachWriteSetsItsFieldsWholeAndAFullReadFillsACardWithoutValues(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        func listed() async throws -> [String: [String: JSONValue]?] {
            let records = try await f.store.listCards(accountID: f.account, syncListID: f.list.id, after: 0, limit: 10)
            return Dictionary(uniqueKeysWithValues: records.map { ($0.cardID, FieldValues.card($0.values, stamps: $0.stamps, settings: .default)) })
        }
        var card = fullCard("Milk")
        card["location"] = .object(["name": "Shop", "latitude": .number(52.5), "longitude": .number(13.4), "address": "Main St 1"])
        card["due_date"] = "2026-12-03T09:30:00.000Z"
        _ = try await f.observe("c1", .fields(card, full: true), at: 1_700_000_000)
        #expect(try await listed()["c1"]??["location"]?["address"] == "Main St 1")

        // A location without an address replaces the stored one (not merged into it); a cleared date stays, as null.
        let moved: JSONValue = .object(["name": "Market", "latitude": .number(52.6), "longitude": .number(13.5)])
        _ = try await f.observe("c1", .fields(["location": moved, "due_date": .null], full: false), at: 1_700_000_010)
        let after = try #require(try await listed()["c1"] ?? nil)
        #expect(after["location"] == moved, "\(after)")
        #expect(after["due_date"] == .null && after["title"] == "Milk", "\(after)")

        // An outbound write: what it wrote, over the rest.
        var write = SyncWrite(accountID: f.account, syncListID: f.list.id, cardID: "c1", reminderID: "R1")
        write.stamp("title", "Oat milk", time: 1_700_000_020)
        _ = try await f.store.recordSyncWrite(write)
        let written = try #require(try await listed()["c1"] ?? nil)
        #expect(written["title"] == "Oat milk" && written["location"] == moved, "\(written)")

        // A card the store knew before it kept values (stamps only): listed with no fields until a full read of it.
        let old = fullCard("Bread")
        var stampsOnly = SyncWrite(accountID: f.account, syncListID: f.list.id, cardID: "c2", reminderID: "R2")
        for (field, value) in old { stampsOnly.stamps[field] = FieldStamp(hash: value.fieldHash, time: 1_700_000_000) }
        _ = try await f.store.recordSyncWrite(stampsOnly)
        #expect(try await listed()["c2"] == .some(nil))
        #expect(try await f.observe("c2", .fields(old, full: true), at: 1_700_000_100) == 0, "nothing changed for the apps")
        #expect(try await listed()["c2"]??["title"] == "Bread")
    }
}
