import RoundupCore
import Testing

/// What a Trello card becomes for the apps (`CardMapper`), and which `updateCard` payloads make the worker read the
/// card (`CardEventInterpreter`): pure, no store and no network.
@Suite struct CardFieldsTests {
    /// A card as `GET /cards/{id}?fields=all&…&attachments=true` gives it, with labels, links, an upload and a due
    /// reminder.
    static let card: [String: JSONValue] = [
        "id": "c1", "name": "Pack", "desc": "", "due": "2026-12-01T09:00:00.000Z", "start": .null, "dueComplete": false,
        "idLabels": .array(["l-b", "l-a", "l-gone"]),
        "labels": .array([
            .object(["id": "l-a", "idBoard": "b1", "name": "Home", "color": "green"]),
            .object(["id": "l-b", "idBoard": "b1", "name": "", "color": "red"]),
        ]),
        "attachments": .array([
            .object(["id": "a1", "name": "Tickets", "url": "https://example.com/tickets", "isUpload": false, "mimeType": .null]),
            .object([
                "id": "a2", "name": "plan.pdf", "url": "https://trello.com/1/cards/c1/attachments/a2/download/plan.pdf", "isUpload": true,
                "mimeType": "application/pdf",
            ]),
            .object(["id": "a3", "name": "Map", "url": "https://maps.example.com/x", "isUpload": false]),
        ]),
        "dueReminder": .number(30), "shortUrl": "https://trello.com/c/AbCdEf12",
    ]

    @Test func aFullCardCarriesLabelsAttachmentsItsPageAndItsDueReminder() {
        let fields = CardMapper.fields(fromCard: Self.card)
        // In the card's order, names and colours from the card; a label it names without them keeps its id.
        #expect(
            fields[SyncField.labels]
                == .array([
                    .object(["id": "l-b", "name": "", "color": "red"]), .object(["id": "l-a", "name": "Home", "color": "green"]),
                    .object(["id": "l-gone", "name": .null, "color": .null]),
                ]))
        #expect(fields[SyncField.attachments]?.arrayValue?.count == 3)
        #expect(
            fields[SyncField.attachments]?.arrayValue?[1]
                == .object([
                    "id": "a2", "name": "plan.pdf", "url": "https://trello.com/1/cards/c1/attachments/a2/download/plan.pdf", "is_upload": true,
                    "mime_type": "application/pdf",
                ]))
        // `url` keeps its meaning: the first link.
        #expect(fields[SyncField.url] == "https://example.com/tickets")
        #expect(fields[SyncField.trelloURL] == "https://trello.com/c/AbCdEf12")
        #expect(fields[SyncField.dueReminderMinutes] == .number(30))
        #expect(Set(fields.keys) == Set(SyncField.names))
    }

    @Test func noDueReminderIsNull() {
        for value: JSONValue in [.null, .number(-1)] {
            var card = Self.card
            card["dueReminder"] = value
            #expect(CardMapper.fields(fromCard: card)[SyncField.dueReminderMinutes] == .null, "\(value)")
        }
        var card = Self.card
        card.removeValue(forKey: "dueReminder")
        #expect(CardMapper.fields(fromCard: card)[SyncField.dueReminderMinutes] == .null)
    }

    /// A list's settings stored before the fields of 2026-11-26 existed (a one-way list, say) name only the fields of
    /// then: the new ones still flow from Trello, as by default.
    @Test func settingsStoredBeforeNewFieldsSyncThemFromTrello() throws {
        var old = SyncSettings.default
        old.direction = .trelloToReminders
        for field in SyncSettings.fieldsAddedLater { old.fields.removeValue(forKey: field) }
        // As it was stored then: no version, and no new field.
        guard case .object(let object)? = old.storedText.flatMap({ try? JSONParser.parse(Array($0.utf8)) }) else {
            Issue.record("settings not stored as an object")
            return
        }
        let then = JSONValue.object(object.filter { $0.key != "fields_version" }).canonicalJSON
        #expect(!then.contains(SyncField.trelloURL.rawValue))
        let read = SyncSettings(stored: then)
        for field in SyncSettings.fieldsAddedLater {
            #expect(read.syncsToReminders(field), "\(field)")
            #expect(!read.syncsToTrello(field), "\(field)")
        }
        #expect(read.direction == .trelloToReminders)
        // Stored now, a map that leaves them out means it.
        #expect(SyncSettings(stored: old.storedText) == old)
    }

    /// The same due reminder from a webhook payload and from a read of the card: one hash, so no change flips.
    @Test func aDueReminderFromThePayloadHashesAsFromTheCard() {
        let partial = CardMapper.partialFields(card: ["dueReminder": .number(30)], changedAttributes: ["dueReminder"])
        #expect(partial == [SyncField.dueReminderMinutes.rawValue: .number(30)])
        #expect(partial[SyncField.dueReminderMinutes]?.fieldHash == CardMapper.fields(fromCard: Self.card)[SyncField.dueReminderMinutes]?.fieldHash)
    }

    static func update(old: [String: JSONValue], card: [String: JSONValue] = [:]) throws -> [CardEvent] {
        var data: [String: JSONValue] = ["id": "c1"]
        for (key, value) in card { data[key] = value }
        let body = JSONValue.object([
            "action": .object([
                "id": "act1", "type": "updateCard",
                "data": .object(["card": .object(data), "old": .object(old), "list": .object(["id": "L1"]), "board": .object(["id": "B1"])]),
            ])
        ])
        return CardEventInterpreter.events(for: try TrelloWebhookBody(json: body))
    }

    /// An attribute the payload does not map (a location, a cover, labels by id, anything new) makes the worker read
    /// the card, so the edit reaches the apps now; a card's place in its list is still nothing the apps see.
    @Test func anUpdateOfAnAttributeThePayloadDoesNotMapReadsTheCard() throws {
        for old: [String: JSONValue] in [
            ["address": .null, "locationName": .null, "coordinates": .null], ["idLabels": .array([])],
            ["somethingTrelloAddsNextYear": .number(1)], ["name": "Old", "address": .null],
        ] {
            let events = try Self.update(old: old)
            #expect(events.map { $0.kind } == [CardEvent.Kind.fetch], "\(old)")
            #expect(events.first?.listID == "L1" && events.first?.cardID == "c1")
        }
        // A place in the list, or a cover (its image attachment's own action reads the card): nothing to read.
        for old: [String: JSONValue] in [["pos": .number(1)], ["cover": .null], ["idAttachmentCover": .null], ["pos": .number(2), "cover": .null]] {
            #expect(try Self.update(old: old).isEmpty, "\(old)")
        }
        // Members beside a title: the title's value, and a read for lists that filter by member.
        let both = try Self.update(old: ["name": "Old", "idMembers": .array([])], card: ["name": "New"]).map { $0.kind }
        #expect(both == [CardEvent.Kind.fields([SyncField.title.rawValue: "New"]), CardEvent.Kind.membersChanged])
        #expect(try Self.update(old: ["idMembers": .array([])]).map { $0.kind } == [CardEvent.Kind.membersChanged])
        let renamed = try Self.update(old: ["name": "Old"], card: ["name": "New"]).map { $0.kind }
        #expect(renamed == [CardEvent.Kind.fields([SyncField.title.rawValue: "New"])])
        let reminded = try Self.update(old: ["dueReminder": .number(1440)], card: ["dueReminder": .number(5)]).map { $0.kind }
        #expect(reminded == [CardEvent.Kind.fields([SyncField.dueReminderMinutes.rawValue: .number(5)])])
    }

    /// Bodies of our own, shaped as Trello sends them, for what ../shared/trello-fixtures lacks: every checklist and check
    /// item action reads the card; a board label renamed, recoloured or deleted names no card, and is kept (not
    /// filtered out at the ingress) so the worker can have the board's lists reconciled.
    @Test func checklistActionsReadTheCardAndBoardLabelActionsNameNone() throws {
        func body(_ type: String, _ data: [String: JSONValue]) throws -> TrelloWebhookBody {
            try TrelloWebhookBody(json: .object(["action": .object(["id": "act1", "type": .string(type), "data": .object(data)])]))
        }
        let where_: [String: JSONValue] = ["list": .object(["id": "L1"]), "board": .object(["id": "B1"])]
        for type in [
            "createCheckItem", "updateCheckItem", "updateCheckItemStateOnCard", "deleteCheckItem", "updateChecklist", "addChecklistToCard",
            "removeChecklistFromCard",
        ] {
            var data = where_
            data["card"] = .object(["id": "c1", "name": "Card"])
            data["checklist"] = .object(["id": "cl1", "name": "Steps"])
            data["checkItem"] = .object(["id": "ci1", "name": "One", "state": "complete"])
            let events = CardEventInterpreter.events(for: try body(type, data))
            #expect(events.map(\.kind) == [CardEvent.Kind.fetch] && events.first?.cardID == "c1", "\(type)")
            #expect(TrelloActionType.handled.contains(type), "\(type)")
        }
        for type in ["updateLabel", "deleteLabel"] {
            let data: [String: JSONValue] = [
                "label": .object(["id": "lab1", "name": "Home", "color": "green"]), "board": .object(["id": "B1"]),
                "old": .object(["name": "House"]),
            ]
            #expect(CardEventInterpreter.events(for: try body(type, data)).isEmpty, "\(type)")
            #expect(TrelloActionType.handled.contains(type) && TrelloActionType.boardLabelChanges.contains(type))
        }
    }
}
