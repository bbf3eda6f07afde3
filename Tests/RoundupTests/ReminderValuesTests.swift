import Foundation
import RoundupClient
import Testing

@testable import RoundupSync

/// The engine's rules for a reminder's values, without a server: what it sends of checklists and links (what changed
/// since the synced copy), what a store that keeps fewer fields holds, and a state saved before a field was carried.
struct ReminderValuesTests {
    typealias List = ReminderChecklist
    typealias Item = ReminderChecklist.Item

    static let papers = List(id: "c1", name: "Papers", items: [Item(id: "i1", name: "Payslips"), Item(id: "i2", name: "Receipts", completed: true)])

    struct ChecklistCase: Sendable, CustomTestStringConvertible {
        let name: String
        let after: [List]
        let sent: [ChecklistInput]
        var testDescription: String { name }
    }

    static let checklistCases: [ChecklistCase] = [
        ChecklistCase(name: "unchanged", after: [papers], sent: []),
        ChecklistCase(
            name: "an item ticked and one renamed",
            after: [
                List(
                    id: "c1", name: "Papers",
                    items: [Item(id: "i1", name: "Payslips", completed: true), Item(id: "i2", name: "Bills", completed: true)])
            ],
            sent: [ChecklistInput(id: "c1", items: [CheckItemInput(id: "i1", completed: true), CheckItemInput(id: "i2", name: "Bills")])]),
        ChecklistCase(
            name: "an item added, one removed, the list renamed",
            after: [List(id: "c1", name: "Tax papers", items: [Item(id: "i1", name: "Payslips"), Item(name: "Bank statement")])],
            sent: [
                ChecklistInput(
                    id: "c1", name: "Tax papers",
                    items: [CheckItemInput(name: "Bank statement", completed: false), CheckItemInput(id: "i2", deleted: true)])
            ]),
        ChecklistCase(
            name: "a new checklist and the old one deleted",
            after: [List(name: "Keys", items: [Item(name: "Spare key", completed: true)])],
            sent: [
                ChecklistInput(name: "Keys", items: [CheckItemInput(name: "Spare key", completed: true)]), ChecklistInput(id: "c1", deleted: true),
            ]),
        ChecklistCase(
            name: "an id the synced copy lacks is new",
            after: [papers, List(id: "elsewhere", name: "Copied", items: [Item(id: "x", name: "Item")])],
            sent: [ChecklistInput(name: "Copied", items: [CheckItemInput(name: "Item", completed: false)])]),
    ]

    @Test(arguments: checklistCases) func checklistsAreSentAsWhatChanged(_ test: ChecklistCase) {
        #expect(ReminderValues.checklistChanges(from: [Self.papers], to: test.after) == test.sent)
    }

    @Test func linksAreAddedAndRemovedAndUploadsKept() {
        let before = [
            ReminderAttachment(id: "a1", name: "Form", url: "https://example.com/form"),
            ReminderAttachment(id: "a2", name: "scan.png", url: "https://trello.com/scan.png", isUpload: true, mimeType: "image/png"),
        ]
        #expect(ReminderValues.attachmentChanges(from: before, to: before).isEmpty)
        let after = [ReminderAttachment(name: "New quote", url: "https://example.com/new")]
        #expect(
            ReminderValues.attachmentChanges(from: before, to: after) == [
                AttachmentInput(name: "New quote", url: "https://example.com/new"), AttachmentInput(id: "a1", deleted: true),
            ], "the upload is never removed from the apps")
    }

    @Test func aStoreThatKeepsFewerFieldsHoldsNoneOfTheOthers() {
        let full = ReminderValues(
            title: "Tax", notes: "n", completed: true, priority: 1, url: "https://example.com", labels: [ReminderLabel(id: "l", name: "Home")],
            checklists: [Self.papers], location: Location(name: "Office", address: nil), dueReminderMinutes: 30)
        let basic = full.keeping(ReminderField.basic)
        #expect(basic.title == "Tax" && basic.completed && basic.priority == 1 && basic.url == "https://example.com")
        #expect(basic.labels.isEmpty && basic.checklists.isEmpty && basic.location == nil && basic.dueReminderMinutes == nil)
        #expect(full.keeping(Set(ReminderField.allCases)) == full)
        #expect(basic.fields(differingFrom: full).map(\.rawValue) == ["labels", "checklists", "location", "due_reminder_minutes"])
        // A create from that store gives the server only what it keeps: the card's other fields are not written.
        let sent = full.syncFields(since: nil, carrying: ReminderField.basic)
        #expect(sent.labels == nil && sent.checklists == nil && sent.attachments == nil && sent.location == nil && sent.title == "Tax")
    }

    @Test func aStateSavedBeforeTheNewFieldsReadsThemAsNone() throws {
        let saved = Data(#"{"title":"Milk","notes":"","completed":false,"priority":0,"dueDate":"2026-12-03"}"#.utf8)
        let values = try JSONDecoder().decode(ReminderValues.self, from: saved)
        #expect(values == ReminderValues(title: "Milk", dueDate: .day(year: 2026, month: 12, day: 3)))
        let again = try JSONDecoder().decode(ReminderValues.self, from: JSONEncoder().encode(values))
        #expect(again == values)
    }
}
