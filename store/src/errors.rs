//! etcd's client-visible errors: the same gRPC code and message text, because
//! clients (kube-apiserver's storage layer among them) match on both.
use tonic::{Code, Status};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    EmptyKey,
    KeyNotFound,
    ValueProvided,
    LeaseProvided,
    TooManyOps,
    DuplicateKey,
    Compacted,
    FutureRev,
    LeaseNotFound,
    LeaseExist,
    LeaseTtlTooLarge,
    RequestTooLarge,
    InvalidSortOption,
    /// A write refused by the quota or while the NOSPACE alarm is raised.
    NoSpace,
    /// A write refused while the CORRUPT alarm is raised.
    Corrupt,
    /// A replicated member's group did not take the request in time (etcd's
    /// ErrTimeout: it may still take effect).
    Timeout,
}

impl StoreError {
    pub fn message(&self) -> &'static str {
        match self {
            StoreError::EmptyKey => "etcdserver: key is not provided",
            StoreError::KeyNotFound => "etcdserver: key not found",
            StoreError::ValueProvided => "etcdserver: value is provided",
            StoreError::LeaseProvided => "etcdserver: lease is provided",
            StoreError::TooManyOps => "etcdserver: too many operations in txn request",
            StoreError::DuplicateKey => "etcdserver: duplicate key given in txn request",
            StoreError::Compacted => "etcdserver: mvcc: required revision has been compacted",
            StoreError::FutureRev => "etcdserver: mvcc: required revision is a future revision",
            StoreError::LeaseNotFound => "etcdserver: requested lease not found",
            StoreError::LeaseExist => "etcdserver: lease already exists",
            StoreError::LeaseTtlTooLarge => "etcdserver: too large lease TTL",
            StoreError::RequestTooLarge => "etcdserver: request is too large",
            StoreError::InvalidSortOption => "etcdserver: invalid sort option",
            StoreError::NoSpace => "etcdserver: mvcc: database space exceeded",
            StoreError::Corrupt => "etcdserver: corrupt cluster",
            StoreError::Timeout => "etcdserver: request timed out",
        }
    }

    pub fn code(&self) -> Code {
        match self {
            StoreError::Compacted | StoreError::FutureRev | StoreError::LeaseTtlTooLarge => {
                Code::OutOfRange
            }
            StoreError::LeaseNotFound => Code::NotFound,
            StoreError::LeaseExist => Code::FailedPrecondition,
            StoreError::NoSpace => Code::ResourceExhausted,
            StoreError::Corrupt => Code::DataLoss,
            StoreError::Timeout => Code::Unavailable,
            _ => Code::InvalidArgument,
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl From<StoreError> for Status {
    fn from(e: StoreError) -> Status {
        Status::new(e.code(), e.message())
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;
