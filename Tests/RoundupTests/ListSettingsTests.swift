import Foundation
import NIOHTTP1
import RoundupCore
import RoundupStore
import RoundupTesting
import Testing

/// JSON written as text, for documents in tests.
func j(_ text: String) -> JSONValue {
    do { return try JSONParser.parse(Array(text.utf8)) } catch { fatalError("bad JSON in a test: \(text)") }
}

/// The rules of a settings document, without a server.
@Suite struct SyncSettingsRulesTests {
    @Test func theDefaultsSyncEveryFieldBothWaysAndRoundTrip() throws {
        let defaults = SyncSettings.default
        #expect(SyncField.all.allSatisfy { defaults.syncsToReminders($0) })
        #expect(defaults.syncsToTrello(SyncField.title) && defaults.syncsToTrello(SyncField.labels) && !defaults.syncsToTrello(SyncField.trelloURL))
        #expect(try SyncSettings(json: defaults.json) == defaults)
        #expect(defaults.storedText == nil && SyncSettings(stored: nil) == defaults)

        let custom = try SyncSettings(
            json: j(
                #"{"direction":"both","fields":{"title":{"direction":"both"},"notes":{"direction":"trello_to_reminders","conflict_policy":"prefer_trello"}},"filter":{"labels":["lab1"],"members":["mem1"],"open_only":true},"initial":"new_cards"}"#
            ))
        #expect(SyncSettings(stored: custom.storedText) == custom)
        #expect(custom.syncsToReminders(SyncField.notes) && !custom.syncsToTrello(SyncField.notes))
        #expect(custom.direction(of: SyncField.dueDate) == nil)
        #expect(custom.conflictPolicy(of: SyncField.notes, account: .manual) == .preferTrello)
        #expect(custom.conflictPolicy(of: SyncField.title, account: .lww) == .lww)
    }

    @Test func movingLinksToNotesIsASettingOffByDefaultThatIsStoredAndChecked() throws {
        #expect(SyncSettings.default.moveLinksToNotes == false && SyncSettings.default.json["move_links_to_notes"] == false)
        let moving = try SyncSettings(json: j(#"{"move_links_to_notes":true}"#))
        #expect(moving.moveLinksToNotes && moving.fields == SyncSettings.allFields)
        #expect(SyncSettings(stored: moving.storedText) == moving)
        // Text stored before the setting existed reads as off; a partial document keeps it.
        #expect(SyncSettings(stored: #"{"direction":"both","initial":"new_cards"}"#).moveLinksToNotes == false)
        #expect(try SyncSettings(json: j(#"{"initial":"new_cards"}"#), over: moving).moveLinksToNotes)
        #expect(throws: SyncSettings.Invalid("settings.move_links_to_notes must be true or false")) {
            try SyncSettings(json: j(#"{"move_links_to_notes":"yes"}"#))
        }
    }

    @Test func aPartialDocumentKeepsWhatItLeavesOut() throws {
        let base = try SyncSettings(json: j(#"{"direction":"trello_to_reminders","filter":{"labels":["a1"]}}"#))
        let next = try SyncSettings(json: j(#"{"filter":{"open_only":true}}"#), over: base)
        #expect(next.direction == .trelloToReminders && next.filter.labels == ["a1"] && next.filter.openOnly)
    }

    @Test func everyMistakeIsNamed() {
        let cases: [(String, String)] = [
            (#""both""#, "settings must be an object"),
            (#"{"speed":"fast"}"#, "settings.speed is not a setting"),
            (#"{"direction":"sideways"}"#, "settings.direction must be one of both, trello_to_reminders, reminders_to_trello"),
            (#"{"initial":"all"}"#, "settings.initial must be one of open_cards, new_cards, nothing"),
            (#"{"fields":{"notes":{}}}"#, "settings.fields must include title"),
            (#"{"fields":{"title":{},"colour":{}}}"#, "settings.fields.colour: unknown field"),
            (#"{"fields":{"title":{"direction":"trello_to_reminders"}}}"#, "settings.fields.title.direction must include"),
            (
                #"{"direction":"trello_to_reminders","fields":{"title":{},"notes":{"direction":"reminders_to_trello"}}}"#,
                "settings.fields.notes.direction reminders_to_trello is outside the list's direction trello_to_reminders"
            ),
            (
                #"{"fields":{"title":{},"trello_url":{"direction":"reminders_to_trello"}}}"#,
                "settings.fields.trello_url can only flow from Trello to Reminders"
            ),
            (#"{"fields":{"title":{"conflict_policy":"coin_toss"}}}"#, "settings.fields.title.conflict_policy must be one of"),
            (#"{"filter":{"labels":["not an id"]}}"#, "settings.filter.labels must hold Trello ids"),
            (#"{"filter":{"open_only":"yes"}}"#, "settings.filter.open_only must be true or false"),
            (#"{"filter":{"colour":"red"}}"#, "settings.filter.colour is not a filter"),
        ]
        for (document, message) in cases {
            do {
                _ = try SyncSettings(json: j(document))
                Issue.record("accepted \(document)")
            } catch {
                #expect(error.description.contains(message), "\(document): \(error.description)")
            }
        }
    }

    @Test func theFilterAndTheInitialModeDecideWhichCardsSync() {
        let filter = CardFilter(labels: ["l1", "l2"], members: ["m1"], openOnly: true)
        #expect(filter.admits(CardFacts(labels: ["l2"], members: ["m1", "m9"])))
        #expect(!filter.admits(CardFacts(labels: ["l3"], members: ["m1"])))
        #expect(!filter.admits(CardFacts(labels: ["l1"], members: [])))
        #expect(!filter.admits(CardFacts(labels: ["l1"], members: ["m1"], complete: true)))
        #expect(CardFilter().admits(CardFacts(complete: true)))
        #expect(
            CardFacts(card: j(#"{"idLabels":["l1"],"idMembers":["m1"],"dueComplete":true}"#).objectValue ?? [:])
                == CardFacts(labels: ["l1"], members: ["m1"], complete: true))

        let paired = Date(timeIntervalSince1970: 1_790_000_000)
        let before = String(format: "%08x", 1_789_999_000) + "0000000000000001"
        let after = String(format: "%08x", 1_790_000_000) + "0000000000000002"
        #expect(TrelloID.creationDate(after) == paired && TrelloID.creationDate("card-1") == nil)
        let newCards = SyncSettings(initial: .newCards)
        #expect(newCards.admitsNewCard(cardID: after, mapped: false, pairedAt: paired))
        #expect(!newCards.admitsNewCard(cardID: before, mapped: false, pairedAt: paired))
        #expect(newCards.admitsNewCard(cardID: before, mapped: true, pairedAt: paired))
        let nothing = SyncSettings(initial: .nothing)
        #expect(
            !nothing.admitsNewCard(cardID: after, mapped: false, pairedAt: paired)
                && nothing.admitsNewCard(cardID: after, mapped: true, pairedAt: paired))
        #expect(!SyncSettings(direction: .remindersToTrello).admitsNewCard(cardID: after, mapped: true, pairedAt: paired))
    }
}

/// Per-list settings end to end: the fake Trello, the real ingress, worker and API, and an app driven over HTTP.
@Suite(.serialized) struct ListSettingsTests {
    func startStack(_ backend: StoreBackend) async throws -> Stack {
        let stack = try await Stack(store: backend)
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        return stack
    }

    /// Pulls and acks every change (a create gets reminder `R-<card>`); returns them.
    func pull(_ s: SyncSetup) async throws -> [JSONValue] {
        try await s.stack.quiet()
        let changes = try await s.changes()
        var made: [String: String] = [:]
        for change in changes where change["change_type"] == "create" {
            if let card = change["trello_card_id"]?.stringValue, change["reminder_id"] == .null { made[card] = "R-\(card)" }
        }
        try await s.ack(changes, reminders: made)
        return changes
    }

    func reconcile(_ s: SyncSetup) async throws -> JSONValue {
        let response = try await s.stack.callAPI(.POST, "/dailyroundup/lists/\(s.listID)/reconcile", token: s.token)
        #expect(response.status == .accepted, "\(response.body)")
        let job = try await s.wait(job: try #require(response.json["job_id"]?.stringValue))
        #expect(job["status"] == "completed", "\(job)")
        return job
    }

    func putSettings(_ s: SyncSetup, _ settings: JSONValue) async throws -> Stack.Response {
        try await s.stack.callAPI(
            .PUT, "/dailyroundup/lists/\(s.listID)", token: s.token, body: JSONValue.object(["settings": settings]).canonicalJSON)
    }

    @Test(arguments: StoreBackend.available) func aOneWayListNeverWritesToTheOtherSide(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }

        // Trello → Reminders: Trello's cards and edits arrive; nothing the app does reaches Trello.
        let down = try await SyncSetup.make(
            stack, list: "Ldown", board: "Bdown", policy: "manual", listSettings: j(#"{"direction":"trello_to_reminders"}"#))
        let card = stack.trello.userCreateCard(listID: "Ldown", name: "Team task")
        #expect(try await pull(down).map(\.["change_type"]) == ["create"])
        let madeBefore = stack.trello.cardsCreated
        let edits = try await down.sync([
            down.change("update", reminder: "R-\(card)", fields: ["title": "My own title"], changed: ["title"]),
            down.change("create", reminder: "R-new", fields: ["title": "Only on my phone"]),
            down.change("delete", reminder: "R-\(card)"),
        ])
        let results = try #require(edits["results"]?.arrayValue)
        #expect(results.map(\.["status"]) == ["skipped", "skipped", "skipped"], "\(edits)")
        #expect(results[0]["skipped_fields"] == j(#"["title"]"#) && results[0]["reason"]?.stringValue?.contains("title") == true)
        #expect(stack.trello.cardsCreated == madeBefore)
        #expect(stack.trello.cardValue(card)?["name"] == "Team task" && stack.trello.cardValue(card)?["closed"] == false)
        // Both sides edit the title: still nothing reaches Trello, Trello's edit reaches the app.
        stack.trello.userUpdateCard(id: card, ["name": "Renamed in Trello"])
        _ = try await down.sync([down.change("update", reminder: "R-\(card)", fields: ["title": "Mine again"], changed: ["title"])])
        let pulled = try await pull(down)
        #expect(pulled.map(\.["fields"]?["title"]) == ["Renamed in Trello"], "\(pulled)")
        _ = try await reconcile(down)
        #expect(try await pull(down).isEmpty)
        #expect(stack.trello.cardValue(card)?["name"] == "Renamed in Trello" && stack.trello.cardsCreated == madeBefore)

        // Reminders → Trello: the app's reminders and edits reach Trello; nothing of Trello's reaches the app, even when
        // both edit one field under the manual policy, or a reconciliation compares the list.
        let up = try await SyncSetup.make(
            stack, list: "Lup", board: "Bup", policy: "manual", listSettings: j(#"{"direction":"reminders_to_trello"}"#))
        let foreign = stack.trello.userCreateCard(listID: "Lup", name: "Made in Trello")
        let made = try await up.sync([up.change("create", reminder: "U1", fields: ["title": "From my phone", "notes": "n"])])
        let mine = try #require(made["results"]?[0]?["trello_card_id"]?.stringValue)
        #expect(made["results"]?[0]?["status"] == "ok" && stack.trello.cardValue(mine)?["name"] == "From my phone")
        stack.trello.userUpdateCard(id: mine, ["name": "Edited in Trello", "desc": "trello notes"])
        try await stack.quiet()
        let conflicting = try await up.sync([up.change("update", reminder: "U1", fields: ["title": "Phone wins"], changed: ["title"])])
        #expect(conflicting["results"]?[0]?["status"] == "ok", "\(conflicting)")
        #expect(stack.trello.cardValue(mine)?["name"] == "Phone wins")
        stack.trello.userDeleteCard(id: foreign)
        _ = try await reconcile(up)
        #expect(try await pull(up).isEmpty)
        let conflicts = try await stack.callAPI(.GET, "/dailyroundup/conflicts", token: up.token)
        #expect(conflicts.json["conflicts"]?.arrayValue?.isEmpty == true, "\(conflicts.body)")
    }

    @Test(arguments: StoreBackend.available) func eachFieldFlowsItsOwnWayWithItsOwnPolicy(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let settings = j(
            #"{"fields":{"title":{"direction":"both","conflict_policy":"prefer_reminders"},"notes":{"direction":"trello_to_reminders"},"completed":{"direction":"reminders_to_trello"},"start_date":{"direction":"both","conflict_policy":"prefer_trello"}}}"#
        )
        let s = try await SyncSetup.make(stack, list: "Lfields", board: "Bfields", policy: "manual", listSettings: settings)
        let listed = try await stack.callAPI(.GET, "/dailyroundup/lists/\(s.listID)", token: s.token)
        #expect(listed.json["settings"]?["fields"]?["notes"] == j(#"{"conflict_policy":null,"direction":"trello_to_reminders"}"#), "\(listed.body)")

        let card = stack.trello.userCreateCard(listID: "Lfields", name: "Card", desc: "first notes", due: "2026-12-01T09:00:00Z")
        let created = try await pull(s)
        #expect(created.count == 1)
        // A create carries only the fields that reach Reminders.
        #expect(
            Set(created.first?["fields"]?.objectValue.map { Array($0.keys) } ?? []) == [
                SyncField.title.rawValue, SyncField.notes.rawValue, SyncField.startDate.rawValue,
            ])

        // Trello's edits: notes arrive, completed and the due date (not synced) do not.
        stack.trello.userUpdateCard(id: card, ["desc": "second notes"])
        stack.trello.userUpdateCard(id: card, ["dueComplete": true, "due": "2026-12-02T09:00:00Z"])
        let updates = try await pull(s)
        #expect(updates.map(\.["changed_fields"]) == [j(#"["notes"]"#)], "\(updates)")

        // The app's edits: completed and the title are written, notes and the due date are not.
        let job = try await s.sync([
            s.change(
                "update", reminder: "R-\(card)", fields: ["title": "Mine", "notes": "app notes", "completed": false, "due_date": .null],
                changed: ["title", "notes", "completed", "due_date"])
        ])
        #expect(job["results"]?[0]?["status"] == "ok" && job["results"]?[0]?["skipped_fields"] == j(#"["due_date","notes"]"#), "\(job)")
        let after = try #require(stack.trello.cardValue(card))
        #expect(
            after["name"] == "Mine" && after["dueComplete"] == false && after["desc"] == "second notes" && after["due"] == "2026-12-02T09:00:00.000Z")

        // Conflicts under the fields' own policies, the account's being manual: title prefers Reminders, start_date
        // prefers Trello (its value goes to the app), and neither is left for the user.
        stack.trello.userUpdateCard(id: card, ["name": "Trello title", "start": "2026-11-30T08:00:00Z"])
        try await stack.quiet()
        let clash = try await s.sync([
            s.change(
                "update", reminder: "R-\(card)", fields: ["title": "App title", "start_date": "2026-11-29T08:00:00Z"],
                changed: ["title", "start_date"],
                modified: Date().addingTimeInterval(-30))
        ])
        #expect(clash["results"]?[0]?["status"] == "ok", "\(clash)")
        #expect(stack.trello.cardValue(card)?["name"] == "App title" && stack.trello.cardValue(card)?["start"] == "2026-11-30T08:00:00.000Z")
        let toApp = try await pull(s)
        #expect(toApp.last?["fields"]?["start_date"] == "2026-11-30T08:00:00.000Z" && toApp.last?["fields"]?["title"] != "Trello title", "\(toApp)")
        let conflicts = try await stack.callAPI(.GET, "/dailyroundup/conflicts", token: s.token)
        #expect(conflicts.json["conflicts"]?.arrayValue?.isEmpty == true, "\(conflicts.body)")
    }

    @Test(arguments: StoreBackend.available) func theFilterTurnsCardsIntoCreatesAndDeletes(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lfilter", board: "Bfilter", listSettings: j(#"{"filter":{"labels":["lab1"]}}"#))

        let plain = stack.trello.userCreateCard(listID: "Lfilter", name: "No label")
        #expect(try await pull(s).isEmpty)
        stack.trello.userSetLabel(cardID: plain, labelID: "lab1", on: true)
        let came = try await pull(s)
        #expect(came.map(\.["change_type"]) == ["create"] && came.first?["trello_card_id"]?.stringValue == plain, "\(came)")
        stack.trello.userUpdateCard(id: plain, ["name": "Labelled"])
        #expect(try await pull(s).map(\.["change_type"]) == ["update"])
        stack.trello.userSetLabel(cardID: plain, labelID: "lab1", on: false)
        let left = try await pull(s)
        #expect(left.map(\.["change_type"]) == ["delete"] && left.first?["reminder_id"] == .string("R-\(plain)"), "\(left)")

        // A reminder made in the app gets the label, so its card keeps matching (no delete comes back).
        let made = try await s.sync([s.change("create", reminder: "A1", fields: ["title": "From the app"])])
        let appCard = try #require(made["results"]?[0]?["trello_card_id"]?.stringValue)
        #expect(stack.trello.cardValue(appCard)?["idLabels"] == j(#"["lab1"]"#))
        let back = try await pull(s)
        #expect(back.map(\.["change_type"]) == ["update"] && back.first?["changed_fields"] == .array(["labels", "trello_url"]), "\(back)")
        #expect(back.first?["fields"]?["labels"]?[0]?["id"] == "lab1", "\(back)")

        // Filtering by "me": resolved to the token's member; the change takes effect at once, by a reconciliation.
        let me = FakeTrello.Member.api(token: "test-token").id
        let put = try await putSettings(s, j(#"{"filter":{"labels":[],"members":["me"]}}"#))
        #expect(put.status == .ok && put.json["settings"]?["filter"]?["members"] == .array([.string(me)]), "\(put.body)")
        var changes: [JSONValue] = []
        #expect(
            try await TestSupport.eventually(timeout: .seconds(30)) {
                changes += try await pull(s)
                return changes.contains { $0["change_type"] == "delete" && $0["trello_card_id"]?.stringValue == appCard }
            }, "the app's card has the label but not the member: \(changes)")
        let mine = stack.trello.userCreateCard(listID: "Lfilter", name: "Assigned later")
        #expect(try await pull(s).isEmpty)
        stack.trello.userSetMember(cardID: mine, memberID: me, on: true)
        #expect(try await pull(s).map(\.["trello_card_id"]) == [.string(mine)])
        stack.trello.userSetMember(cardID: mine, memberID: me, on: false)
        #expect(try await pull(s).map(\.["change_type"]) == ["delete"])

        // open_only: a card marked complete in Trello leaves the apps.
        _ = try await putSettings(s, j(#"{"filter":{"members":[],"open_only":true}}"#))
        try await stack.quiet()
        _ = try await reconcile(s)
        _ = try await pull(s)
        stack.trello.userUpdateCard(id: mine, ["dueComplete": true])
        #expect(try await pull(s).map(\.["change_type"]) == ["delete"])
        stack.trello.userUpdateCard(id: mine, ["dueComplete": false])
        #expect(try await pull(s).map(\.["change_type"]) == ["create"])
    }

    @Test(arguments: StoreBackend.available) func theInitialModeDecidesWhichTrelloCardsBecomeReminders(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        // new_cards: the cards already in the list stay out, through an import and a reconciliation.
        stack.trello.addList(id: "Lnew", boardID: "Bnew")
        let old = stack.trello.userCreateCard(listID: "Lnew", name: "Before the pairing")
        // Trello's ids count seconds: the pairing comes in a later second than the old card.
        try await Task.sleep(for: .milliseconds(1100))
        let s = try await SyncSetup.make(stack, list: "Lnew", board: "Bnew", listSettings: j(#"{"initial":"new_cards"}"#))
        try await Task.sleep(for: .milliseconds(1100))
        let fresh = stack.trello.userCreateCard(listID: "Lnew", name: "After the pairing")
        let imported = try await stack.callAPI(.POST, "/dailyroundup/lists/\(s.listID)/import", token: s.token)
        _ = try await s.wait(job: try #require(imported.json["job_id"]?.stringValue))
        _ = try await reconcile(s)
        let changes = try await pull(s)
        #expect(changes.map(\.["trello_card_id"]) == [.string(fresh)], "\(changes)")
        stack.trello.userUpdateCard(id: old, ["name": "Still before"])
        #expect(try await pull(s).isEmpty)

        // nothing: no Trello card becomes a reminder, but a card made from a reminder syncs both ways.
        let n = try await SyncSetup.make(stack, list: "Lnothing", board: "Bnothing", listSettings: j(#"{"initial":"nothing"}"#))
        let theirs = stack.trello.userCreateCard(listID: "Lnothing", name: "Trello's")
        _ = try await reconcile(n)
        #expect(try await pull(n).isEmpty)
        let made = try await n.sync([n.change("create", reminder: "N1", fields: ["title": "Mine"])])
        let card = try #require(made["results"]?[0]?["trello_card_id"]?.stringValue)
        stack.trello.userUpdateCard(id: card, ["name": "Mine, renamed in Trello"])
        let back = try await pull(n)
        #expect(back.map(\.["fields"]?["title"]) == ["Mine, renamed in Trello"] && back.first?["reminder_id"] == "N1", "\(back)")
        stack.trello.userUpdateCard(id: theirs, ["name": "Trello's, renamed"])
        #expect(try await pull(n).isEmpty)
    }

    @Test(arguments: StoreBackend.available) func badSettingsAreRefusedWithWhatIsWrong(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lbad", board: "Bbad")
        #expect(try await stack.callAPI(.GET, "/dailyroundup/lists/\(s.listID)", token: s.token).json["settings"] == SyncSettings.default.json)
        for (body, message) in [
            (#"{"settings":{"direction":"sideways"}}"#, "settings.direction must be one of"),
            (#"{"settings":{"fields":{"notes":{}}}}"#, "settings.fields must include title"),
            (#"{"settings":{"filter":{"labels":["x y"]}}}"#, "settings.filter.labels must hold Trello ids"),
            (#"{"name":"renamed"}"#, "unknown field \"name\""),
            (#"{}"#, "settings is required"),
        ] {
            let response = try await stack.callAPI(.PUT, "/dailyroundup/lists/\(s.listID)", token: s.token, body: body)
            #expect(
                response.status == .unprocessableEntity && response.json["error"]?["message"]?.stringValue?.contains(message) == true,
                "\(body): \(response.body)")
        }
        let missing = try await stack.callAPI(.PUT, "/dailyroundup/lists/nope", token: s.token, body: #"{"settings":{}}"#)
        #expect(missing.status == .notFound, "\(missing.body)")
        let pairing = try await stack.callAPI(
            .POST, "/dailyroundup/lists", token: s.token,
            body: #"{"name":"x","trello_board_id":"Bbad","trello_list_id":"Lbad2","settings":{"initial":"everything"}}"#)
        #expect(
            pairing.status == .unprocessableEntity && pairing.json["error"]?["message"]?.stringValue?.contains("settings.initial") == true,
            "\(pairing.body)")
        // Nothing was changed by the refused requests.
        #expect(try await stack.callAPI(.GET, "/dailyroundup/lists/\(s.listID)", token: s.token).json["settings"] == SyncSettings.default.json)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/lists", token: s.token).json["lists"]?.arrayValue?.count == 1)
    }
}
