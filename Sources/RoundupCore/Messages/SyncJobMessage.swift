/// A sync, import or reconcile job queued for the workers on the job stream; the job itself is a row in the store.
public struct SyncJobMessage: StreamMessage, Equatable {
    public enum Field: String, CaseIterable, Sendable {
        case job, account, kind
    }

    public var jobID: String
    public var account: String?
    /// The job's kind (nil in an entry written without one, or with a kind this version does not know: the job's row
    /// in the store is what counts).
    public var kind: JobKind?

    public init(jobID: String, account: String?, kind: JobKind?) {
        self.jobID = jobID
        self.account = account
        self.kind = kind
    }

    public init?(fields: [String: [UInt8]]) {
        guard let job = fields.text(Field.job) else { return nil }
        self.init(jobID: job, account: fields.text(Field.account), kind: fields.text(Field.kind).flatMap(JobKind.init(rawValue:)))
    }

    public var fields: [(name: String, value: [UInt8])] {
        var fields: [(name: String, value: [UInt8])] = []
        fields.append(Field.job, jobID)
        if let account { fields.append(Field.account, account) }
        if let kind { fields.append(Field.kind, kind.rawValue) }
        return fields
    }
}
