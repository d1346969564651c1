//! KV service: Range, RangeStream, Put, DeleteRange, Txn, Compact.
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use etcd_client::proto::*;
use futures::Stream;
use prost::Message;
use tonic::{Request, Response, Status};

use super::Ctx;
use crate::errors::StoreError;

pub struct KvService(pub Arc<Ctx>);

/// Keys per RangeStream chunk: small enough to keep each message far below
/// the gRPC limit for Kubernetes objects, large enough to amortise framing.
const STREAM_CHUNK: usize = 500;

impl KvService {
    /// etcd has two limits: gRPC refuses messages above --max-request-bytes +
    /// 512 KiB (ResourceExhausted, gRPC-Go's message), and the server refuses
    /// proposals above --max-request-bytes ("request is too large").
    fn too_large<M: Message>(&self, m: &M, proposal: bool) -> Result<(), Status> {
        let n = m.encoded_len();
        let grpc_limit = self.0.cfg.max_request_bytes + crate::server::GRPC_OVERHEAD;
        if n > grpc_limit {
            return Err(Status::resource_exhausted(format!("grpc: received message larger than max ({n} vs. {grpc_limit})")));
        }
        if proposal && n > self.0.cfg.max_request_bytes {
            return Err(StoreError::RequestTooLarge.into());
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl PbKvService for KvService {
    async fn range(&self, request: Request<PbRangeRequest>) -> Result<Response<PbRangeResponse>, Status> {
        self.0.metrics.range.fetch_add(1, Ordering::Relaxed);
        self.too_large(request.get_ref(), false)?;
        let mut resp = self.0.store.range(request.get_ref())?;
        self.0.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    type RangeStreamStream = Pin<Box<dyn Stream<Item = Result<PbRangeStreamResponse, Status>> + Send>>;

    async fn range_stream(&self, request: Request<PbRangeRequest>) -> Result<Response<Self::RangeStreamStream>, Status> {
        self.0.metrics.range.fetch_add(1, Ordering::Relaxed);
        let mut resp = self.0.store.range(request.get_ref())?;
        self.0.fill(&mut resp.header);
        // Chunks carry disjoint slices of kvs; header, more and count go on the last one.
        let mut chunks: Vec<Result<PbRangeStreamResponse, Status>> = Vec::new();
        let mut kvs = std::mem::take(&mut resp.kvs);
        while kvs.len() > STREAM_CHUNK {
            let rest = kvs.split_off(STREAM_CHUNK);
            chunks.push(Ok(PbRangeStreamResponse { range_response: Some(PbRangeResponse { kvs, ..Default::default() }) }));
            kvs = rest;
        }
        resp.kvs = kvs;
        chunks.push(Ok(PbRangeStreamResponse { range_response: Some(resp) }));
        Ok(Response::new(Box::pin(futures::stream::iter(chunks))))
    }

    async fn put(&self, request: Request<PbPutRequest>) -> Result<Response<PbPutResponse>, Status> {
        self.0.metrics.put.fetch_add(1, Ordering::Relaxed);
        let req = request.get_ref();
        self.too_large(req, true)?;
        let mut resp = self.0.store.put(req)?;
        self.0.synced(resp.header.as_ref().map_or(0, |h| h.revision)).await;
        self.0.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn delete_range(&self, request: Request<PbDeleteRequest>) -> Result<Response<PbDeleteResponse>, Status> {
        self.0.metrics.delete.fetch_add(1, Ordering::Relaxed);
        let req = request.get_ref();
        self.too_large(req, true)?;
        let mut resp = self.0.store.delete_range(req)?;
        self.0.synced(resp.header.as_ref().map_or(0, |h| h.revision)).await;
        self.0.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn txn(&self, request: Request<PbTxnRequest>) -> Result<Response<PbTxnResponse>, Status> {
        self.0.metrics.txn.fetch_add(1, Ordering::Relaxed);
        let req = request.get_ref();
        self.too_large(req, true)?;
        let mut resp = self.0.store.txn(req)?;
        self.0.synced(resp.header.as_ref().map_or(0, |h| h.revision)).await;
        self.0.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn compact(&self, request: Request<PbCompactionRequest>) -> Result<Response<PbCompactionResponse>, Status> {
        self.too_large(request.get_ref(), true)?;
        let rev = self.0.store.compact(request.get_ref().revision)?;
        Ok(Response::new(PbCompactionResponse { header: self.0.header(rev) }))
    }
}
