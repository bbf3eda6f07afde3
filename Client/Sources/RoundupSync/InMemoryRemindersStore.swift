import Foundation
import RoundupClient

/// A `RemindersStore` in memory, for tests (the engine's, and an app's own): reminders by id, each in a list.
public actor InMemoryRemindersStore: RemindersStore {
    private var reminders: [String: Reminder] = [:]
    private var order: [String] = []
    private var made = 0
    private let prefix: String
    /// The fields it keeps: every one unless told (`ReminderField.basic` is what an adapter over `EKReminder`'s own
    /// properties keeps). A field it does not keep is written as none, as such an adapter would.
    public nonisolated let carriedFields: Set<ReminderField>

    public init(idPrefix: String = "R", carrying carriedFields: Set<ReminderField> = Set(ReminderField.allCases)) {
        prefix = idPrefix
        self.carriedFields = carriedFields
    }

    public func reminders(inList listID: String) -> [Reminder] { order.compactMap { reminders[$0] }.filter { $0.listID == listID } }
    public func reminder(_ id: String) -> Reminder? { reminders[id] }
    /// Every reminder, in the order they were made.
    public var all: [Reminder] { order.compactMap { reminders[$0] } }

    public func create(_ values: ReminderValues, inList listID: String) -> String {
        made += 1
        let id = "\(prefix)-\(made)"
        reminders[id] = Reminder(id: id, listID: listID, values: values.keeping(carriedFields), modifiedAt: Date())
        order.append(id)
        return id
    }

    public func update(_ id: String, _ values: ReminderValues) {
        var values = values
        // A repeating reminder completed is EventKit's next occurrence: open, due the next time.
        if let days = repeating[id], values.completed, reminders[id]?.values.completed == false, let due = values.dueDate {
            values.completed = false
            values.dueDate = due.adding(days: days)
        }
        reminders[id]?.values = values.keeping(carriedFields)
        reminders[id]?.modifiedAt = Date()
    }

    private var repeating: [String: Int] = [:]

    /// Makes the reminder repeat every `days` days, as EventKit's recurrence rule would: completing it then leaves it
    /// open, due `days` later.
    public func setRepeating(_ id: String, everyDays days: Int) { repeating[id] = days }
    public func move(_ id: String, toList listID: String) {
        reminders[id]?.listID = listID
        reminders[id]?.modifiedAt = Date()
    }

    public func delete(_ id: String) {
        reminders[id] = nil
        order.removeAll { $0 == id }
    }

    /// The person's edit, as EventKit would report it: `change` applied to the reminder's values (a repeating one
    /// completed moves to its next occurrence, as `update`).
    public func edit(_ id: String, _ change: (inout ReminderValues) -> Void) {
        guard var values = reminders[id]?.values else { return }
        change(&values)
        update(id, values)
    }
}

extension ReminderDateValue {
    /// The same kind of date, `days` days later (a day stays a day; an instant moves by whole days).
    func adding(days: Int) -> ReminderDateValue {
        switch self {
        case .instant(let date): return .instant(date.addingTimeInterval(Double(days) * 86_400))
        case .day(let year, let month, let day):
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = TimeZone(identifier: "UTC")!
            let date = calendar.date(from: DateComponents(year: year, month: month, day: day))!.addingTimeInterval(Double(days) * 86_400)
            let parts = calendar.dateComponents([.year, .month, .day], from: date)
            return .day(year: parts.year!, month: parts.month!, day: parts.day!)
        }
    }
}
