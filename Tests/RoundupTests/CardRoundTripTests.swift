import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupJobs
import RoundupTesting
import Testing

/// Everything a card holds, both ways, through the real processes and the fake Trello: what a person does in Trello
/// reaches the apps typed and complete, and what the apps edit reaches the card, with no echo of our own writes.
@Suite(.serialized) struct CardRoundTripTests {
    func startStack(_ backend: StoreBackend) async throws -> Stack { try await SyncJobTests().startStack(backend) }

    /// A board with three labels (one without a name) and a Priority dropdown of three options.
    func board(_ stack: Stack, _ board: String) {
        stack.trello.setBoardLabels(boardID: board, [("lab-red", "Urgent stuff", "red"), ("lab-green", "Home", "green"), ("lab-sky", "", "sky")])
        stack.trello.setPriorityField(boardID: board, fieldID: "F1", options: [("o-urgent", "Urgent"), ("o-high", "High"), ("o-low", "Low")])
    }

    /// The account's new changes (acknowledged, creates mapped to reminder "R-<card>"), and what the apps hold of the
    /// card after applying them: each change's fields over the last.
    func pull(_ s: SyncSetup, into view: inout [String: JSONValue]) async throws -> [JSONValue] {
        try await s.stack.quiet()
        let changes = try await s.changes()
        var made: [String: String] = [:]
        for change in changes {
            if change["change_type"] == "create", let card = change["trello_card_id"]?.stringValue { made[card] = "R-\(card)" }
            for (field, value) in change["fields"]?.objectValue ?? [:] { view[field] = value }
        }
        try await s.ack(changes, reminders: made)
        return changes
    }

    @Test(arguments: StoreBackend.available) func everythingACardHoldsReachesTheAppsTyped(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        board(stack, "Bfull")
        let s = try await SyncSetup.make(stack, list: "Lfull", board: "Bfull")
        var view: [String: JSONValue] = [:]
        let card = stack.trello.userCreateCard(listID: "Lfull", name: "Tax return", desc: "Before the 15th", due: "2026-12-01T09:00:00.000Z")
        _ = try await pull(s, into: &view)
        // A person fills the card in Trello, one edit at a time, as Trello's UI makes them.
        stack.trello.userSetLabel(cardID: card, labelID: "lab-red", on: true)
        stack.trello.userSetLabel(cardID: card, labelID: "lab-green", on: true)
        let (checklist, items) = stack.trello.userAddChecklist(cardID: card, name: "Papers", items: ["Payslips", "Receipts"])
        stack.trello.userSetCheckItem(cardID: card, itemID: items[0], completed: true)
        let form = stack.trello.userAddAttachment(cardID: card, url: "https://example.com/form", name: "Form")
        let guide = stack.trello.userAddAttachment(cardID: card, url: "https://example.com/guide", name: "Guide")
        let pdf = stack.trello.userAddAttachment(
            cardID: card, url: "https://trello.com/1/cards/\(card)/attachments/x/download/2025.pdf", name: "2025.pdf", upload: true,
            mimeType: "application/pdf")
        stack.trello.userUpdateCard(id: card, ["dueReminder": .number(30)])
        stack.trello.userUpdateCard(id: card, ["locationName": "Tax office", "address": "1 Main St", "coordinates": "48.85,2.35"])
        stack.trello.userSetPriority(cardID: card, fieldID: "F1", optionID: "o-urgent")
        _ = try await pull(s, into: &view)

        #expect(view["title"] == "Tax return" && view["notes"] == "Before the 15th" && view["due_date"] == "2026-12-01T09:00:00.000Z")
        #expect(
            view["labels"]
                == .array([
                    .object(["id": "lab-red", "name": "Urgent stuff", "color": "red"]),
                    .object(["id": "lab-green", "name": "Home", "color": "green"]),
                ]), "\(String(describing: view["labels"]))")
        #expect(
            view["checklists"]
                == .array([
                    .object([
                        "id": .string(checklist), "name": "Papers",
                        "items": .array([
                            .object(["id": .string(items[0]), "name": "Payslips", "completed": true]),
                            .object(["id": .string(items[1]), "name": "Receipts", "completed": false]),
                        ]),
                    ])
                ]), "\(String(describing: view["checklists"]))")
        let attachments = view["attachments"]?.arrayValue ?? []
        #expect(attachments.compactMap { $0["id"]?.stringValue } == [form, guide, pdf], "\(attachments)")
        #expect(
            attachments.last?["is_upload"] == true && attachments.last?["mime_type"] == "application/pdf" && attachments.last?["name"] == "2025.pdf")
        #expect(view["url"] == "https://example.com/form", "the first link, for apps that show one")
        #expect(view["trello_url"] == .string("https://trello.com/c/" + String(card.suffix(8))))
        #expect(view["due_reminder_minutes"] == .number(30))
        #expect(view["location"] == .object(["name": "Tax office", "address": "1 Main St", "latitude": .number(48.85), "longitude": .number(2.35)]))
        #expect(view["priority"] == "urgent" && view["priority_level"] == .number(1), "\(view)")

        // A checklist renamed in Trello reaches the apps through its webhook (`updateChecklist`).
        stack.trello.userRenameChecklist(checklistID: checklist, name: "Tax papers")
        let renamedList = try await pull(s, into: &view)
        #expect(renamedList.count == 1 && renamedList.first?["changed_fields"] == .array(["checklists"]), "\(renamedList)")
        #expect(view["checklists"]?[0]?["name"] == "Tax papers" && view["checklists"]?[0]?["items"]?.arrayValue?.count == 2)

        // A label renamed on the board reaches the cards that carry it.
        stack.trello.userUpdateLabel(boardID: "Bfull", labelID: "lab-green", name: "Household", color: "lime")
        var renamed: [JSONValue] = []
        let came = try await TestSupport.eventually(timeout: .seconds(20)) {
            renamed += try await pull(s, into: &view)
            return !renamed.isEmpty
        }
        #expect(came && renamed.count == 1, "\(renamed)")
        #expect(view["labels"]?[1] == .object(["id": "lab-green", "name": "Household", "color": "lime"]), "\(String(describing: view["labels"]))")
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func whatTheAppsEditReachesTheCardWithNoEcho(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        board(stack, "Bedit")
        let s = try await SyncSetup.make(stack, list: "Ledit", board: "Bedit")
        var view: [String: JSONValue] = [:]
        let card = stack.trello.userCreateCard(listID: "Ledit", name: "Move house")
        let (checklist, items) = stack.trello.userAddChecklist(cardID: card, name: "Boxes", items: ["Kitchen", "Books"])
        let old = stack.trello.userAddAttachment(cardID: card, url: "https://example.com/old", name: "Old quote")
        let scan = stack.trello.userAddAttachment(
            cardID: card, url: "https://trello.com/x/scan.png", name: "scan.png", upload: true, mimeType: "image/png")
        _ = try await pull(s, into: &view)
        let reminder = "R-\(card)"

        // Labels by name and by id; the apps get them back with ids, names and colours.
        let labelled = try await s.sync([
            s.change("update", reminder: reminder, fields: ["labels": .array(["home", .object(["id": "lab-red"])])], changed: ["labels"])
        ])
        #expect(labelled["results"]?[0]?["status"] == "ok", "\(labelled)")
        #expect(stack.trello.cardValue(card)?["idLabels"] == .array(["lab-green", "lab-red"]))
        var told = try await pull(s, into: &view)
        #expect(told.count == 1 && told.first?["changed_fields"] == .array(["labels"]), "\(told)")
        #expect(view["labels"]?[0] == .object(["id": "lab-green", "name": "Home", "color": "green"]))

        // A tick, a rename, a new item and a new checklist; nothing the app left out is deleted.
        let edited = try await s.sync([
            s.change(
                "update", reminder: reminder,
                fields: [
                    "checklists": .array([
                        .object([
                            "id": .string(checklist),
                            "items": .array([
                                .object(["id": .string(items[0]), "completed": true]), .object(["id": .string(items[1]), "name": "All the books"]),
                                .object(["name": "Bathroom"]),
                            ]),
                        ]),
                        .object(["name": "Keys", "items": .array([.object(["name": "Spare key", "completed": true])])]),
                    ])
                ], changed: ["checklists"])
        ])
        #expect(edited["results"]?[0]?["status"] == "ok", "\(edited)")
        let lists = stack.trello.cardValue(card)?["checklists"]?.arrayValue ?? []
        #expect(lists.count == 2, "\(lists)")
        let boxes = lists.first?["checkItems"]?.arrayValue ?? []
        #expect(
            boxes.map { $0["name"] } == ["Kitchen", "All the books", "Bathroom"]
                && boxes.map { $0["state"] } == ["complete", "incomplete", "incomplete"])
        #expect(lists.last?["name"] == "Keys" && lists.last?["checkItems"]?[0]?["state"] == "complete")
        told = try await pull(s, into: &view)
        #expect(told.count == 1 && told.first?["changed_fields"] == .array(["checklists"]), "the new items' ids: \(told)")
        let known = Checklists(view["checklists"] ?? .null)
        #expect(known.lists.map(\.items.count) == [3, 1] && known.lists.allSatisfy { !$0.id.isEmpty })
        // Sent back as received: nothing to write, nothing comes back.
        let requests = stack.trello.state.withLockedValue { $0.requests.count }
        let same = try await s.sync([s.change("update", reminder: reminder, fields: ["checklists": view["checklists"]!], changed: ["checklists"])])
        #expect(same["results"]?[0]?["status"] == "ok")
        #expect(
            stack.trello.state.withLockedValue { Array($0.requests[requests...]) }.allSatisfy { $0.hasPrefix("GET") },
            "a value sent back unchanged writes nothing")
        #expect(try await pull(s, into: &view).isEmpty)

        // The location, the due reminder, the priority by level, a link added and one removed.
        let more = try await s.sync([
            s.change(
                "update", reminder: reminder,
                fields: [
                    "location": .object(["name": "New flat", "address": "2 High St", "latitude": .number(51.5), "longitude": .number(-0.12)]),
                    "due_reminder_minutes": .number(15), "priority_level": .number(5),
                    "attachments": .array([
                        .object(["id": .string(old), "deleted": true]), .object(["url": "https://example.com/new", "name": "New quote"]),
                    ]),
                ], changed: ["location", "due_reminder_minutes", "priority_level", "attachments"])
        ])
        #expect(more["results"]?[0]?["status"] == "ok", "\(more)")
        let after = try #require(stack.trello.cardValue(card))
        #expect(after["locationName"] == "New flat" && after["address"] == "2 High St")
        #expect(after["coordinates"]?["latitude"] == .number(51.5) && after["coordinates"]?["longitude"] == .number(-0.12))
        #expect(after["dueReminder"] == .number(15))
        #expect(after["customFieldItems"]?[0]?["idValue"] == "o-high", "level 5 is the middle of three options")
        #expect(after["attachments"]?.arrayValue?.compactMap { $0["name"]?.stringValue } == ["scan.png", "New quote"])
        told = try await pull(s, into: &view)
        #expect(told.count == 1, "\(told)")
        #expect(told.first?["changed_fields"] == .array(["attachments", "priority", "url"]), "what changed with what the app sent: \(told)")
        #expect(view["priority"] == "high" && view["url"] == "https://example.com/new")

        // A location cleared, a due reminder removed.
        let cleared = try await s.sync([
            s.change(
                "update", reminder: reminder, fields: ["location": .null, "due_reminder_minutes": .null],
                changed: ["location", "due_reminder_minutes"])
        ])
        #expect(cleared["results"]?[0]?["status"] == "ok", "\(cleared)")
        #expect(CardMapper.fields(fromCard: stack.trello.cardValue(card) ?? [:])["location"] == .null)
        #expect(stack.trello.cardValue(card)?["dueReminder"] == .number(-1))
        #expect(try await pull(s, into: &view).isEmpty, "our own writes came back")

        // What cannot be written fails its item alone, naming the field, before anything of it is written.
        let refused = try await s.sync([
            s.change("update", reminder: reminder, fields: ["labels": .array(["Work"]), "title": "Not written"], changed: ["labels", "title"]),
            s.change(
                "update", reminder: reminder, fields: ["attachments": .array([.object(["id": .string(scan), "deleted": true])])],
                changed: ["attachments"]),
            s.change("update", reminder: reminder, fields: ["priority_level": .number(12)], changed: ["priority_level"]),
            s.change(
                "update", reminder: reminder, fields: ["priority": "urgent", "priority_level": .number(9)], changed: ["priority", "priority_level"]),
        ])
        let results = refused["results"]?.arrayValue ?? []
        #expect(results.map { $0["status"] } == ["error", "error", "error", "error"], "\(refused)")
        for (result, field) in zip(results, ["fields.labels[0]", "fields.attachments[0]", "fields.priority_level", "fields.priority_level"]) {
            #expect(result["error"]?.stringValue?.hasPrefix(field) == true, "\(result)")
        }
        #expect(stack.trello.cardValue(card)?["name"] == "Move house")
        #expect(stack.trello.cardValue(card)?["attachments"]?.arrayValue?.count == 2)
        await stack.shutdown()
    }

    /// What our write sent back to the apps (label ids for names) is their own value: editing the field again before
    /// pulling it is no conflict, even under `manual`, and the value sent back never undoes the newer edit.
    @Test(arguments: StoreBackend.available) func editingAgainBeforePullingWhatCameBackIsNoConflict(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        board(stack, "Bagain")
        let s = try await SyncSetup.make(stack, list: "Lagain", board: "Bagain", policy: "manual")
        let made = try await s.sync([s.change("create", reminder: "A1", fields: ["title": "Groceries", "labels": .array(["Home"])])])
        #expect(made["results"]?[0]?["status"] == "ok", "\(made)")
        let card = try #require(made["results"]?[0]?["trello_card_id"]?.stringValue)
        try await stack.quiet()
        // Not pulled: the label's id and colour wait in the feed. The app changes the labels and the priority level.
        let again = try await s.sync([
            s.change("update", reminder: "A1", fields: ["labels": .array(["urgent stuff"])], changed: ["labels"]),
            s.change("update", reminder: "A1", fields: ["priority_level": .number(1)], changed: ["priority_level"]),
            s.change("update", reminder: "A1", fields: ["priority": "low"], changed: ["priority"]),
        ])
        #expect(again["results"]?.arrayValue?.map { $0["status"] } == ["ok", "ok", "ok"], "\(again)")
        #expect(try await stack.callAPI(.GET, "/dailyroundup/conflicts", token: s.token).json["conflicts"]?.arrayValue?.isEmpty == true)
        var view: [String: JSONValue] = [:]
        _ = try await pull(s, into: &view)
        #expect(stack.trello.cardValue(card)?["idLabels"] == .array(["lab-red"]))
        #expect(view["labels"] == .array([.object(["id": "lab-red", "name": "Urgent stuff", "color": "red"])]), "\(view)")
        #expect(view["priority"] == "low" && view["priority_level"] == .number(9), "the last edit stands in the apps: \(view)")
        await stack.shutdown()
    }

    /// Trello fails a request in the middle of an item's checklist and link writes (a 500 after the checklist was
    /// made): the item is retried, and what the first attempt made is not made twice, nor taken for a Trello edit.
    @Test(arguments: StoreBackend.available) func anItemRetriedMidWriteMakesNothingTwice(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        board(stack, "Bretry")
        let s = try await SyncSetup.make(stack, list: "Lretry", board: "Bretry", policy: "prefer_reminders")
        let card = stack.trello.userCreateCard(listID: "Lretry", name: "Trip")
        var view: [String: JSONValue] = [:]
        _ = try await pull(s, into: &view)
        // The checklist's create goes through; the first of its items' requests (POST /1/checklists/…) fails.
        stack.trello.failNextRequests(status: 500, count: 1, pathPrefix: "/1/checklists/")
        let job = try await s.sync([
            s.change(
                "update", reminder: "R-\(card)",
                fields: [
                    "checklists": .array([.object(["name": "Pack", "items": .array([.object(["name": "Passport"]), .object(["name": "Charger"])])])]),
                    "attachments": .array([.object(["url": "https://example.com/tickets", "name": "Tickets"])]),
                ], changed: ["checklists", "attachments"])
        ])
        #expect(job["results"]?[0]?["status"] == "ok", "\(job)")
        let after = try #require(stack.trello.cardValue(card))
        let lists = after["checklists"]?.arrayValue ?? []
        #expect(
            lists.count == 1 && lists.first?["checkItems"]?.arrayValue?.compactMap { $0["name"]?.stringValue } == ["Passport", "Charger"], "\(lists)")
        #expect(after["attachments"]?.arrayValue?.count == 1)
        // The failure happened (three item requests: the refused one and the two made) and the checklist was made once.
        let requests = stack.trello.state.withLockedValue { $0.requests }
        #expect(requests.filter { $0.hasPrefix("POST /1/checklists/") }.count == 3, "\(requests)")
        #expect(requests.filter { $0 == "POST /1/cards/\(card)/checklists" }.count == 1)
        let told = try await pull(s, into: &view)
        #expect(Checklists(view["checklists"] ?? .null).lists.map(\.items.count) == [2], "\(told)")
        #expect(try await stack.callAPI(.GET, "/dailyroundup/conflicts", token: s.token).json["conflicts"]?.arrayValue?.isEmpty == true)
        await stack.shutdown()
    }

    /// A reminder made in the apps with every field: the card has them all, and the apps learn the ids Trello gave.
    @Test(arguments: StoreBackend.available) func aReminderMadeInTheAppsArrivesWhole(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        board(stack, "Bmade")
        let s = try await SyncSetup.make(stack, list: "Lmade", board: "Bmade")
        let made = try await s.sync([
            s.change(
                "create", reminder: "A1",
                fields: [
                    "title": "Dentist", "due_date": "2026-12-03T10:00:00Z", "due_reminder_minutes": .number(60), "priority_level": .number(9),
                    "labels": .array(["Urgent stuff"]), "location": .object(["name": "Clinic", "address": "3 Park Rd"]),
                    "checklists": .array([.object(["name": "Bring", "items": .array([.object(["name": "Card"])])])]),
                    "attachments": .array([.object(["url": "https://example.com/booking", "name": "Booking"])]),
                ])
        ])
        #expect(made["results"]?[0]?["status"] == "ok", "\(made)")
        let card = try #require(stack.trello.cardValue(made["results"]?[0]?["trello_card_id"]?.stringValue ?? ""))
        #expect(card["idLabels"] == .array(["lab-red"]) && card["dueReminder"] == .number(60) && card["locationName"] == "Clinic")
        #expect(card["customFieldItems"]?[0]?["idValue"] == "o-low")
        #expect(card["checklists"]?[0]?["checkItems"]?[0]?["name"] == "Card")
        #expect(card["attachments"]?[0]?["name"] == "Booking")
        var view: [String: JSONValue] = [:]
        let told = try await pull(s, into: &view)
        #expect(told.count == 1, "\(told)")
        #expect(
            told.first?["changed_fields"] == .array(["attachments", "checklists", "labels", "priority", "trello_url", "url"]), "\(told)")
        #expect(view["checklists"]?[0]?["items"]?[0]?["id"]?.stringValue?.isEmpty == false)
        #expect(view["labels"] == .array([.object(["id": "lab-red", "name": "Urgent stuff", "color": "red"])]))
        await stack.shutdown()
    }
}
