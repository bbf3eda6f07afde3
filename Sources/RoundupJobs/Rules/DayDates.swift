import Foundation
import RoundupCore
import RoundupStore

extension SyncEngine {
    /// The all-day dates an item sets (their marks, and the day the app sent), and the dates it makes timed again
    /// (marks to forget): recorded with the store write of the fields the card then holds.
    struct DayDates {
        var marks: [String: FieldStamp] = [:]
        var forget: Set<String> = []
        /// The app's value of each all-day date (the day), for a conflict or a duplicate kept to show and write later.
        var days: [String: JSONValue] = [:]

        init() {}

        /// Makes each all-day due or start date of `fields` (of `only`, when given) its instant in `timeZone`.
        init(_ fields: inout [String: JSONValue], only: Set<String>?, timeZone: AccountTimeZone) {
            for field in [SyncField.dueDate, SyncField.startDate] {
                guard let value = fields[field.rawValue], only?.contains(field.rawValue) ?? true else { continue }
                let key = FieldStamps.dayDateKey(field)
                if case .string(let text) = value, let day = DayDate(text) {
                    let instant = Timestamp.string(day.instant(in: timeZone.zone))
                    fields[field.rawValue] = .string(instant)
                    marks[key] = FieldStamps.dayDateStamp(day: day, instant: instant, time: Date().timeIntervalSince1970)
                    days[field.rawValue] = value
                } else {
                    forget.insert(key)
                }
            }
        }

        /// Adds to `record` the marks (and forgets) of the `fields` the card now holds the app's value of.
        func record(into record: inout SyncWrite, fields: some Sequence<String>) {
            for name in fields {
                guard let field = SyncField(rawValue: name), field == .dueDate || field == .startDate else { continue }
                let key = FieldStamps.dayDateKey(field)
                if let mark = marks[key] {
                    record.stamps[key] = mark
                    record.forget.remove(key)
                } else if forget.contains(key) {
                    record.forget.insert(key)
                }
            }
        }

        /// `values` with each all-day date as the app sent it (its day).
        func appValues(_ values: [String: JSONValue]) -> [String: JSONValue] { values.merging(days) { _, day in day } }
    }
}
