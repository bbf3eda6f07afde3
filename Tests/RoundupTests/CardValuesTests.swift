import RoundupCore
import RoundupJobs
import Testing

/// The rules behind the fields the apps write, without a server: priority levels, checklist edits, value checks.
@Suite struct PriorityLevelTests {
    func field(_ texts: [String]) -> PriorityField {
        PriorityField(fieldID: "F", ordered: texts.enumerated().map { PriorityField.Option(id: "o\($0.offset)", text: $0.element) })
    }

    /// Words the rule knows rank by their meaning whatever the board's order; other words keep the board's order.
    @Test(arguments: [
        (["Low", "Medium", "High"], [9, 5, 1]),
        (["High", "Medium", "Low"], [1, 5, 9]),
        (["Urgent", "High", "Low"], [1, 5, 9]),
        (["P1", "P2", "P3", "P4"], [1, 4, 6, 9]),
        (["Now", "Later"], [1, 9]),
        (["Someday"], [1]),
        (["None", "Low", "High"], [0, 9, 1]),
        (["Critical", "Urgent", "Low"], [1, 5, 9]),
    ])
    func levels(texts: [String], expected: [Int]) {
        let f = field(texts)
        #expect(f.ordered.map { f.level(of: $0.id) } == expected, "\(texts)")
    }

    /// Every level picks an option, and an option's own level picks it back: a level sent back unchanged never moves the card.
    @Test(arguments: [1, 2, 3, 4, 5, 9, 10, 12])
    func everyOptionsLevelRoundTrips(count: Int) {
        let f = field((1...count).map { "Option \($0)" })
        for option in f.ordered {
            let level = f.level(of: option.id)
            #expect((1...9).contains(level))
            #expect(f.level(of: f.option(level: level)!.id) == level, "\(option.text) at \(level)")
        }
        for level in 1...9 { #expect(f.option(level: level) != nil) }
        #expect(f.option(level: 0) == nil, "0 clears a field without a none option")
    }

    @Test func theNearestOptionWinsAndTiesGoToTheHigherPriority() {
        let f = field(["High", "Medium", "Low"])
        #expect(f.option(level: 2)?.text == "High" && f.option(level: 3)?.text == "High" && f.option(level: 4)?.text == "Medium")
        #expect(f.option(level: 7)?.text == "Medium" && f.option(level: 8)?.text == "Low")
        #expect(field(["None", "High"]).option(level: 0)?.text == "None")
    }

    @Test func optionsStoredBeforeTheirOrderReadInTheOrderOfTheirIds() {
        let stored = PriorityField(fieldID: "F", storedOptions: #"{"b2":"Low","a1":"High"}"#)
        #expect(stored.ordered.map(\.text) == ["High", "Low"])
        let now = PriorityField(fieldID: "F", storedOptions: field(["Low", "High"]).storedOptions)
        #expect(now.ordered.map(\.text) == ["Low", "High"] && now.level(of: "o0") == 9)
    }

    @Test func aCardsOptionReachesTheAppsAsTextAndLevel() {
        let f = field(["Urgent", "Normal", "Low"])
        let card: [String: JSONValue] = ["customFieldItems": .array([.object(["idCustomField": "F", "idValue": "o1"])])]
        let fields = CardMapper.fields(fromCard: card, priority: f)
        #expect(fields[SyncField.priority] == "normal" && fields[SyncField.priorityLevel] == .number(5))
        #expect(CardMapper.fields(fromCard: [:], priority: f)[SyncField.priorityLevel] == .number(0))
    }
}

@Suite struct ChecklistEditsTests {
    static let current: JSONValue = .array([
        .object([
            "id": "c1", "name": "Boxes",
            "items": .array([
                .object(["id": "i1", "name": "Kitchen", "completed": false]), .object(["id": "i2", "name": "Books", "completed": true]),
            ]),
        ])
    ])

    @Test func anUnchangedValueNeedsNoEdit() {
        #expect(Checklists(Self.current).edits(to: Self.current).isEmpty)
        #expect(Checklists(Self.current).value == Self.current)
    }

    @Test func ticksRenamesAdditionsAndExplicitDeletions() {
        let wanted: JSONValue = .array([
            .object([
                "id": "c1", "name": "Moving boxes",
                "items": .array([
                    .object(["id": "i1", "completed": true]), .object(["id": "i2", "deleted": true]),
                    .object(["name": "Bathroom", "completed": false]),
                    .object(["id": "gone", "completed": true]),
                ]),
            ]),
            .object(["id": "c-gone", "name": "Deleted in Trello"]),
            .object(["name": "Keys", "items": .array([.object(["name": "Spare", "completed": true])])]),
        ])
        var checklists = Checklists(Self.current)
        let edits = checklists.edits(to: wanted)
        #expect(
            edits == [
                .rename(checklistID: "c1", name: "Moving boxes"), .updateItem(checklistID: "c1", itemID: "i1", name: nil, completed: true),
                .deleteItem(checklistID: "c1", itemID: "i2"), .addItem(.id("c1"), name: "Bathroom", completed: false), .create(name: "Keys"),
                .addItem(.created(0), name: "Spare", completed: true),
            ], "\(edits)")
        var made: [String] = []
        for (n, edit) in edits.enumerated() {
            if case .create = edit { made.append("new-\(n)") }
            checklists.apply(edit, newID: "new-\(n)", createdIDs: made)
        }
        #expect(checklists.lists.map(\.name) == ["Moving boxes", "Keys"])
        #expect(checklists.lists[0].items.map(\.name) == ["Kitchen", "Bathroom"] && checklists.lists[0].items[0].completed)
        #expect(checklists.lists[1].items.map(\.name) == ["Spare"])
    }

    @Test func whatTheAppLeavesOutIsKept() {
        let edits = Checklists(Self.current).edits(
            to: .array([.object(["id": "c1", "items": .array([.object(["id": "i2", "completed": false])])])]))
        #expect(edits == [.updateItem(checklistID: "c1", itemID: "i2", name: nil, completed: false)])
    }
}

@Suite struct WritableFieldCheckTests {
    /// A wrong JSON type refuses the request (checkType); a value of the right type that cannot be written fails its item.
    @Test(arguments: [
        (SyncField.labels, JSONValue.string("Home"), "must be an array"),
        (SyncField.labels, .array([.number(1)]), "[0] must be a label's id or name"),
        (SyncField.labels, .array([.object(["color": "red"])]), "[0] must have an id or a name"),
        (SyncField.checklists, .array([.string("x")]), "[0] must be an object"),
        (SyncField.checklists, .array([.object(["items": .array([.object(["completed": "yes"])])])]), "items[0].completed must be true or false"),
        (SyncField.location, .string("Paris"), "must be an object"),
        (SyncField.location, .object(["latitude": "48"]), "latitude must be a number"),
        (SyncField.priorityLevel, .string("high"), "must be a number"),
        (SyncField.dueReminderMinutes, .bool(true), "must be a number of minutes"),
        (SyncField.attachments, .object([:]), "must be an array"),
    ])
    func wrongTypesAreTheRequests(field: SyncField, value: JSONValue, message: String) {
        #expect(throws: SyncFields.Invalid.self) { try SyncFields.checkType(field, value, path: "fields.\(field)") }
        do {
            try SyncFields.checkType(field, value, path: "fields.\(field)")
        } catch let error as SyncFields.Invalid {
            #expect(error.description.contains(message), "\(error.description)")
        } catch {
            Issue.record("\(error)")
        }
    }

    @Test(arguments: [
        (SyncField.location, JSONValue.object(["latitude": .number(48)]), "both latitude and longitude"),
        (SyncField.location, .object(["latitude": .number(91), "longitude": .number(0)]), "latitude must be from -90 to 90"),
        (SyncField.priorityLevel, .number(10), "from 0 (none)"),
        (SyncField.priorityLevel, .number(2.5), "whole number"),
        (SyncField.dueReminderMinutes, .number(100_000), "minutes from 0"),
        (SyncField.checklists, .array([.object(["items": .array([])])]), "[0].name must not be empty"),
        (SyncField.checklists, .array([.object(["id": "c1", "items": .array([.object(["deleted": true])])])]), "needs its id"),
        (SyncField.attachments, .array([.object(["url": "ftp://example.com/x"])]), "[0].url must be an http or https URL"),
    ])
    func unwritableValuesAreTheItems(field: SyncField, value: JSONValue, message: String) throws {
        try SyncFields.checkType(field, value, path: "fields.\(field)")
        do {
            _ = try SyncFields.normalize(field, value, path: "fields.\(field)")
            Issue.record("accepted \(value)")
        } catch let error as SyncFields.Invalid {
            #expect(error.description.hasPrefix("fields.\(field)") && error.description.contains(message), "\(error.description)")
        } catch {
            Issue.record("\(error)")
        }
    }

    /// What the apps received, sent back as it is, normalises to itself (so an unchanged value is never written).
    @Test func receivedValuesNormaliseToThemselves() throws {
        let values: [String: JSONValue] = [
            SyncField.labels.rawValue: .array([
                .object(["id": "l1", "name": "Home", "color": "green"]), .object(["id": "l2", "name": .null, "color": .null]),
            ]),
            SyncField.location.rawValue: .object(["name": "Office", "address": .null, "latitude": .number(1.5), "longitude": .number(2)]),
            SyncField.checklists.rawValue: ChecklistEditsTests.current, SyncField.dueReminderMinutes.rawValue: .number(30),
            SyncField.priorityLevel.rawValue: .number(5),
            SyncField.attachments.rawValue: .array([
                .object(["id": "a1", "name": "Form", "url": "https://example.com", "is_upload": false, "mime_type": .null])
            ]),
        ]
        for (field, value) in values {
            try SyncFields.checkType(named: field, value, path: field)
            #expect(try SyncFields.normalize(named: field, value, path: field) == value, "\(field)")
        }
    }
}

/// Links moved into a card's description (`move_links_to_notes`, the `migrate_links` job): each once, after the notes.
@Suite struct LinkNotesTests {
    @Test func linksGoAfterTheNotesOncePerURL() {
        let spec = LinkNotes.Link(url: "https://example.com/spec", name: "Spec")
        let bare = LinkNotes.Link(url: "https://example.com/a", name: "https://example.com/a")
        #expect(LinkNotes.appending([spec, bare], to: "") == "Spec: https://example.com/spec\nhttps://example.com/a")
        #expect(LinkNotes.appending([spec], to: "Call first\n\n") == "Call first\n\nSpec: https://example.com/spec")
        // A URL the notes hold already, or named twice, goes in once: a second run, or a resumed one, adds nothing.
        let once = LinkNotes.appending([spec, spec, bare], to: "Before the 15th")
        #expect(once == "Before the 15th\n\nSpec: https://example.com/spec\nhttps://example.com/a")
        #expect(LinkNotes.appending([spec, bare], to: once) == once)
        #expect(LinkNotes.appending([LinkNotes.Link(url: "https://example.com/a")], to: "see https://example.com/a") == "see https://example.com/a")
        #expect(LinkNotes.appending([], to: "kept\n") == "kept\n", "no link: the notes are not rewritten")
        #expect(LinkNotes.appending([LinkNotes.Link(url: "x", name: "  ")], to: "") == "x", "a blank name is no name")
    }

    @Test func aCardsLinksAreItsAttachmentsThatAreNotUploads() {
        let card: [String: JSONValue] = [
            "attachments": .array([
                .object(["id": "a1", "url": "https://example.com/1", "name": "One", "isUpload": false]),
                .object(["id": "a2", "url": "https://trello.com/x/scan.png", "name": "scan.png", "isUpload": true]),
                .object(["id": "a3", "url": "https://example.com/3", "name": .null]),
                .object(["id": "a4", "url": "", "name": "empty"]),
            ])
        ]
        let links = LinkNotes.links(ofCard: card)
        #expect(links.map(\.id) == ["a1", "a3"])
        #expect(links.map(\.link) == [LinkNotes.Link(url: "https://example.com/1", name: "One"), LinkNotes.Link(url: "https://example.com/3")])
        #expect(LinkNotes.links(ofCard: [:]).isEmpty)
    }
}
