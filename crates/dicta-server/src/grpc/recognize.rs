//! `Recognize` and `GetRivaSpeechRecognitionConfig`; `StreamingRecognize` is in `streaming.rs`.

use std::collections::HashMap;

use dicta_core::{Error, ErrorKind};
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument as _;

use super::convert;
use super::pb::nvidia::riva::asr::riva_speech_recognition_server::RivaSpeechRecognition;
use super::pb::nvidia::riva::asr::{
    riva_speech_recognition_config_response::Config, RecognizeRequest, RecognizeResponse,
    RivaSpeechRecognitionConfigRequest, RivaSpeechRecognitionConfigResponse,
    StreamingRecognizeRequest,
};
use super::{status, RivaAsr};
use crate::audio::{Payload, RawInput};
use crate::pipeline::TranscribeRequest;

#[tonic::async_trait]
impl RivaSpeechRecognition for RivaAsr {
    async fn recognize(
        &self,
        request: Request<RecognizeRequest>,
    ) -> Result<Response<RecognizeResponse>, Status> {
        let state = &self.state;
        let req = request.into_inner();
        let config = req.config.unwrap_or_default();
        let (format, bytes) = convert::recognize_audio(&config, req.audio).map_err(status)?;
        let options = convert::request_options(&config).map_err(status)?;
        let words = options.word_timestamps;
        let request_id = uuid::Uuid::new_v4().to_string();
        let span = tracing::info_span!("grpc", request_id = %request_id, rpc = "Recognize");
        let tr = TranscribeRequest {
            request_id,
            inputs: vec![RawInput {
                id: "audio".into(),
                payload: Payload::Bytes(bytes),
                format,
            }],
            options,
            model: Some(config.model.clone()).filter(|m| !m.is_empty()),
            segments: None,
        };
        // The same limit as HTTP's 504 (a client's own deadline also ends the call: dropping
        // this future abandons the work).
        let limit = state.cfg.request_timeout();
        let out = tokio::time::timeout(limit, state.pipeline.run(tr).instrument(span))
            .await
            .map_err(|_| {
                status(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "request_timeout_s is {} s, and the request took longer",
                        state.cfg.request_timeout_s
                    ),
                ))
            })?
            .map_err(status)?;
        let transcript = out
            .results
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(Error::internal("no result for the input")))
            .map_err(status)?;
        let mut results = convert::recognize_results(&transcript, words);
        let rules = super::text_rules::TextRules::of(&config);
        for a in results.iter_mut().flat_map(|r| &mut r.alternatives) {
            rules.apply(a);
        }
        // A result left with no words (a segment of punctuation only) is no result.
        results.retain(|r| r.alternatives.iter().any(|a| !a.transcript.is_empty()));
        Ok(Response::new(RecognizeResponse {
            results,
            id: req.id,
        }))
    }

    type StreamingRecognizeStream = super::streaming::ResponseStream;

    async fn streaming_recognize(
        &self,
        request: Request<Streaming<StreamingRecognizeRequest>>,
    ) -> Result<Response<Self::StreamingRecognizeStream>, Status> {
        super::streaming::start(self.state.clone(), request.into_inner())
            .await
            .map(Response::new)
    }

    async fn get_riva_speech_recognition_config(
        &self,
        request: Request<RivaSpeechRecognitionConfigRequest>,
    ) -> Result<Response<RivaSpeechRecognitionConfigResponse>, Status> {
        let state = &self.state;
        let name = request.into_inner().model_name;
        let models: Vec<&(String, std::sync::Arc<dyn crate::Backend>)> = if name.is_empty() {
            state.models.iter().collect()
        } else {
            vec![state
                .model(Some(&name))
                .map_err(|e| status(Error::new(ErrorKind::InvalidInput, e.message)))?]
        };
        let model_config = models
            .into_iter()
            .map(|(name, backend)| {
                let mut parameters = HashMap::new();
                parameters.insert("type".to_string(), "offline".to_string());
                parameters.insert(
                    "streaming".to_string(),
                    backend.supports_streaming().to_string(),
                );
                parameters.insert(
                    "translation".to_string(),
                    backend.supports_translation().to_string(),
                );
                parameters.insert("sample_rate".to_string(), "16000".to_string());
                parameters.insert(
                    "max_audio_seconds".to_string(),
                    state.cfg.max_audio_seconds.to_string(),
                );
                Config {
                    model_name: name.clone(),
                    parameters,
                }
            })
            .collect();
        Ok(Response::new(RivaSpeechRecognitionConfigResponse {
            model_config,
        }))
    }
}
