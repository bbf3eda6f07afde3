public import RoundupCore

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
    /// The trace of the request that made the job (an app's `traceparent` on `/sync`): the job's span continues it.
    public var trace: TraceHeaders?

    public init(jobID: String, account: String?, kind: JobKind?, trace: TraceHeaders? = nil) {
        self.jobID = jobID
        self.account = account
        self.kind = kind
        self.trace = trace
    }

    public init?(fields: [String: [UInt8]]) {
        guard let job = fields.text(Field.job) else { return nil }
        self.init(
            jobID: job, account: fields.text(Field.account), kind: fields.text(Field.kind).flatMap(JobKind.init(rawValue:)),
            trace: TraceHeaders(fields: fields))
    }

    public var fields: [(name: String, value: [UInt8])] {
        var fields: [(name: String, value: [UInt8])] = []
        fields.append(Field.job, jobID)
        if let account { fields.append(Field.account, account) }
        if let kind { fields.append(Field.kind, kind.rawValue) }
        trace?.append(to: &fields)
        return fields
    }
}
